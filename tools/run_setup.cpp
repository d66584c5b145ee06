#include "tools/run_setup.h"

#include <fmt/format.h>

#include "base/error.h"
#include "models/data/byte_tokenizer.h"
#include "models/data/synthetic_corpus.h"
#include "models/hf/pretrained.h"
#include "tools/demo_config.h"

namespace strata::tools {

engine::LoadedConfig load_run_config(const std::string& config_path, int world_size) {
  return config_path.empty()
             ? engine::parse_config_text(demo_config_json(), "the built-in demo config", world_size)
             : engine::load_config_file(config_path, world_size);
}

models::GptShape model_shape(const engine::Config& config) {
  const engine::ModelConfig& m = config.strata.model;
  if (m.n_layer < 1 || m.n_head < 1 || m.d_model < 1 || m.seq_len < 1) {
    throw UserError("strata.model needs n_layer, n_head, d_model and seq_len of at least 1",
                    "set positive values under \"strata\": {\"model\": {...}}", 2);
  }
  const std::int64_t batch = config.batch.train_micro_batch_size_per_gpu;
  if (!m.hf_config.empty())
    return models::gpt_shape(models::read_hf_config(m.hf_config), m.seq_len, batch);
  return {m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab, batch};
}

std::unique_ptr<models::Gpt> make_model(const engine::Config& config,
                                        const models::GptShape& shape) {
  auto gpt = std::make_unique<models::Gpt>(shape);
  if (!config.strata.model.from_pretrained.empty())
    models::load_pretrained(*gpt, config.strata.model.from_pretrained);
  return gpt;
}

models::TokenDataset load_data(const engine::Config& config, const models::GptShape& shape) {
  const engine::DataConfig& data = config.strata.data;
  models::TokenDataset dataset;
  if (!data.path.empty()) {
    dataset = models::TokenDataset::from_file(data.path, data.validation_fraction, data.dtype,
                                              data.validation_path);
  } else {
    const models::CorpusSpec spec;
    models::SyntheticCorpus corpus = models::generate_corpus(spec);
    dataset = models::TokenDataset::from_tokens(models::encode_bytes(corpus.text),
                                                data.validation_fraction);
    dataset.source = fmt::format(
        "the built-in synthetic corpus (first-order Markov chain over {} words, {} successors "
        "each)",
        spec.word_count, spec.successors_per_word);
    dataset.entropy_floor_nats = corpus.entropy_floor_nats_per_byte;
    dataset.byte_level = true;
  }
  // Text may hold any byte: the vocabulary must have room for all of them.
  if (dataset.byte_level && shape.vocab < models::kByteVocab) {
    throw UserError(
        fmt::format("strata.model.vocab {} is smaller than the byte tokenizer's {} "
                    "tokens",
                    shape.vocab, models::kByteVocab),
        fmt::format("set \"strata\": {{\"model\": {{\"vocab\": {}}}}} or more", models::kByteVocab),
        2);
  }
  dataset.check_fits(static_cast<int>(shape.seq_len), static_cast<int>(shape.vocab));
  return dataset;
}

}  // namespace strata::tools
