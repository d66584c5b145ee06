#include "tools/run_setup.h"

#include <fmt/format.h>

#include "base/error.h"
#include "models/data/byte_tokenizer.h"
#include "models/data/synthetic_corpus.h"
#include "tools/demo_config.h"

namespace strata::tools {

engine::LoadedConfig load_run_config(const std::string& config_path, int world_size,
                                     const engine::ConfigOverrides& overrides) {
  return config_path.empty()
             ? engine::parse_config_text(demo_config_json(), "the built-in demo config", world_size,
                                         overrides)
             : engine::load_config_file(config_path, world_size, overrides);
}

models::ModelPlan plan_model(const engine::Config& config) {
  return models::plan_model(config.strata.model, config.batch.train_micro_batch_size_per_gpu);
}

models::TokenDataset load_data(const engine::Config& config, const models::ModelPlan& plan) {
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
  dataset.check_tokenizer(plan.vocab(), config.strata.model.hf_config);
  dataset.check_fits(static_cast<int>(plan.seq_len()), static_cast<int>(plan.vocab()));
  return dataset;
}

}  // namespace strata::tools
