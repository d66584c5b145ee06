#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "models/generate/sampling.h"
#include "models/generate/stop_conditions.h"

namespace strata::engine {
class Engine;
}  // namespace strata::engine

namespace strata::models::generate {

// What one generation is asked for.
struct GenerationRequest {
  std::vector<std::int32_t> prompt;  // at least one token
  SamplingOptions sampling;
  std::uint64_t seed = 0;
  std::int64_t max_new_tokens = 0;  // > 0
  std::vector<std::int32_t> eos_ids;
  std::vector<std::string> stop_strings;  // matched against the text `TextSoFar` gives
};

// A generation's new tokens (the one that stopped it included: an end id is kept, as
// transformers keeps it) and why it stopped.
struct Generation {
  std::vector<std::int32_t> ids;
  StopReason reason = StopReason::max_new_tokens;
};

// Called with each new token: returns all the generated text so far, that token's included
// (whole characters), which the stop strings are matched against. Without stop strings it may
// return anything.
using TextSoFar = std::function<std::string_view(std::int32_t id)>;

// The micro-batch `engine` runs: `rows` sequences of `seq_len` tokens.
struct EngineShape {
  std::int64_t rows = 0;
  std::int64_t seq_len = 0;
};

// Generates from `engine`'s model by one forward over the whole sequence for each new token (no
// cache): the sequence sits at the start of the micro-batch's first row, the rest of the
// micro-batch holds token 0, and the next token comes from the logits at the sequence's last
// position (the model is causal: what follows does not change them). Throws UserError, before
// any forward, when the prompt is empty or the prompt and max_new_tokens together need more
// positions than the model runs with, naming both numbers.
Generation generate_without_cache(engine::Engine& engine, EngineShape shape,
                                  const GenerationRequest& request, const TextSoFar& text);

}  // namespace strata::models::generate
