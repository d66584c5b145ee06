#include "tools/run_setup.h"

#include <fmt/format.h>

#include <utility>

#include "base/error.h"
#include "engine/config/config_error.h"
#include "engine/memory/nvme_store.h"
#include "models/data/byte_tokenizer.h"
#include "models/data/synthetic_corpus.h"
#include "models/data/text_tokens.h"
#include "tools/demo_config.h"
#include "tools/tokenize_progress.h"

namespace strata::tools {

namespace {

constexpr const char* kDemoSource = "the built-in demo config";

// Runs `check`; a UserError it throws is thrown again with `source` in front of its message, so
// that the user knows which file's values it is about. A ConfigError names its source already.
template <class Check>
auto naming_source(const std::string& source, Check&& check) {
  try {
    return check();
  } catch (const engine::ConfigError&) {
    throw;
  } catch (const UserError& error) {
    throw UserError(fmt::format("{}: {}", source, error.what()), error.fix(), error.exit_status());
  }
}

// The swap folders: train makes them when the engine opens its swap files; here they are only
// checked, so that a path that cannot be made is refused before anything starts.
void check_swap_folders(const engine::ZeroConfig& zero) {
  const std::pair<const char*, const engine::OffloadConfig*> offloads[] = {
      {"offload_param", &zero.offload_param}, {"offload_optimizer", &zero.offload_optimizer}};
  for (const auto& [key, offload] : offloads) {
    if (offload->device != engine::OffloadDevice::nvme) continue;
    try {
      engine::memory::check_nvme_path(offload->nvme_path);
    } catch (const UserError& error) {
      throw UserError(fmt::format("zero_optimization.{}.{}", key, error.what()), error.fix(),
                      error.exit_status());
    }
  }
}

}  // namespace

engine::LoadedConfig load_run_config(const std::string& config_path, int world_size,
                                     const engine::ConfigOverrides& overrides) {
  return config_path.empty()
             ? engine::parse_config_text(demo_config_json(), kDemoSource, world_size, overrides)
             : engine::load_config_file(config_path, world_size, overrides);
}

models::ModelPlan plan_model(const engine::Config& config) {
  return models::plan_model(config.strata.model, config.batch.train_micro_batch_size_per_gpu);
}

models::TextTokenizing text_tokenizing(const engine::Config& config, const models::ModelPlan& plan,
                                       TextTokenizers& holder) {
  models::TextTokenizing text;
  const std::filesystem::path hf_config = config.strata.model.hf_config;
  const std::int64_t vocab = plan.vocab();
  text.tokenizer = [&holder, hf_config, vocab]() -> const models::tokenizer::Tokenizer* {
    if (!holder.tokenizer) holder.tokenizer = models::model_tokenizer(hf_config, vocab);
    return *holder.tokenizer ? &**holder.tokenizer : nullptr;
  };
  // Asked after the tokenizer, whose folder holds the template.
  text.chat = [&holder]() -> const models::ChatEncoder* {
    if (!holder.chat) {
      holder.chat = holder.tokenizer && *holder.tokenizer
                        ? models::ChatEncoder::for_tokenizer(**holder.tokenizer)
                        : std::nullopt;
    }
    return *holder.chat ? &**holder.chat : nullptr;
  };
  auto progress = std::make_shared<ProgressLine>("tokenizing");
  text.progress = [progress](std::size_t done, std::size_t total) {
    progress->show(done, total);
    if (done == total) progress->finish();
  };
  return text;
}

models::TokenDataset load_data(const engine::Config& config, const models::ModelPlan& plan) {
  const engine::DataConfig& data = config.strata.data;
  models::TokenDataset dataset;
  if (!data.path.empty()) {
    // Text is made ids by the model folder's own tokenizer, once, into a cache beside it.
    TextTokenizers tokenizers;
    const models::TextTokenizing text = text_tokenizing(config, plan, tokenizers);
    dataset = models::TokenDataset::from_file(data.path, data.validation_fraction, data.dtype,
                                              data.validation_path, text);
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
  dataset.shape_examples(static_cast<int>(plan.seq_len()), config.strata.data.packing);
  return dataset;
}

RunSetup prepare_run(const std::string& config_path, int world_size,
                     const engine::ConfigOverrides& overrides) {
  RunSetup setup{load_run_config(config_path, world_size, overrides), {}, {}};
  const engine::Config& config = setup.loaded.config;
  const std::string source = config_path.empty() ? kDemoSource : config_path;
  naming_source(source, [&] {
    setup.plan = plan_model(config);
    setup.data = load_data(config, setup.plan);
    if (config.strata.data.order == engine::DataOrder::sequential) {
      setup.data.check_sequential_fits(static_cast<int>(setup.plan.batch()),
                                       static_cast<int>(setup.plan.seq_len()));
    }
    check_swap_folders(config.zero);
    return 0;
  });
  return setup;
}

}  // namespace strata::tools
