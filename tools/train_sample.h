#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "models/data/token_dataset.h"
#include "models/generate/generator.h"
#include "models/model_plan.h"
#include "tools/run_setup.h"

namespace strata::engine {
class Engine;
}  // namespace strata::engine

namespace strata::tools {

// One sample: its prompt and the model's continuation, as text (or ids, space-separated, for a
// model without text).
struct TrainSample {
  std::string prompt;
  std::string continuation;

  // "PROMPT" -> "CONTINUATION", each a JSON string (newlines and quotes escaped): one line.
  std::string line() const;
};

// What --sample-every, --sample-prompt and --sample-tokens ask for.
struct SampleOptions {
  std::int64_t every = 0;  // 0: no samples
  std::string prompt;      // "": the validation split's first tokens
  std::int64_t tokens = 64;
};

// `strata train --sample-every N`: a greedy continuation of one prompt from the model being
// trained, at every Nth step and at the last, by strata generate's own code on the run's engine
// (its micro-batch's first row). Shown as the model's tokenizer makes text: the folder's
// tokenizer, bytes for a byte-level run, else the ids.
class TrainSamples {
 public:
  // Encodes the prompt and sizes the sample to the run's seq_len. Throws UserError before the
  // run when the prompt is text the model cannot encode or leaves no room for a new token.
  TrainSamples(const SampleOptions& options, const engine::Config& config,
               const models::ModelPlan& plan, const models::TokenDataset& data);
  TrainSamples(const TrainSamples&) = delete;  // its text points into its tokenizers
  TrainSamples& operator=(const TrainSamples&) = delete;

  // Makes the samples' KV cache before the first step, so that a device with no room for it
  // refuses the run (naming --sample-every) before any training rather than at the first sample.
  void reserve(engine::Engine& engine) const;
  bool due(std::int64_t step, std::int64_t last_step) const;
  // Collective: every rank calls it.
  TrainSample take(engine::Engine& engine) const;

 private:
  std::int64_t every_;
  TextTokenizers tokenizers_;
  models::generate::IdsToText text_;
  models::generate::GenerationRequest request_;
  models::generate::EngineShape shape_;
};

}  // namespace strata::tools
