#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/generate/sampling.h"
#include "models/generate/stop_conditions.h"
#include "models/generate/token_text.h"

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
  std::vector<std::string> stop_strings;  // matched against the generated text
};

// A generation's new tokens (the one that stopped it included: an end id is kept, as
// transformers keeps it), its text as shown (up to a stop string, which is not shown), and why it
// stopped.
struct Generation {
  std::vector<std::int32_t> ids;
  std::string text;
  StopReason reason = StopReason::max_new_tokens;
};

// A batch's generations, in the requests' order, and its time: `prefill_s` until every sequence
// had its first new token, `decode_s` for the rest.
struct Generated {
  std::vector<Generation> sequences;
  double prefill_s = 0;
  double decode_s = 0;

  // New tokens after each sequence's first, per second of decode_s (0 when there were none).
  double decode_tokens_per_s() const;
};

// Called as text may be shown: sequence `index` of the batch has `text` more to show. The text
// is whole characters, and never a stop string or an end of the text that may still become one.
using OnText = std::function<void(std::size_t index, std::string_view text)>;

// The micro-batch `engine` runs, `rows` sequences of `seq_len` tokens, and the positions its
// model holds (its context: a KV cache may run past seq_len up to it).
struct EngineShape {
  std::int64_t rows = 0;
  std::int64_t seq_len = 0;
  std::int64_t positions = 0;
};

// Throws UserError, naming both numbers and the fix, when a prompt of `prompt_tokens` and
// `max_new_tokens` new tokens need more than the `positions` the model runs with, or the prompt
// is empty.
void check_fits(std::int64_t prompt_tokens, std::int64_t max_new_tokens, std::int64_t positions);

// Generates for each request from `engine`'s model by one forward over the whole sequences for
// each new token (no cache). Sequence i sits at the start of the micro-batch's row i (so at most
// shape.rows requests), the rest of the micro-batch holds token 0, and its next token comes from
// the logits at its last position: the model is causal, so what follows does not change them.
// Each sequence draws from its own generator seeded with its request's seed, so a prompt gives
// the same text alone or in a batch. Throws UserError before any forward for a request that does
// not fit (check_fits), or that has stop strings and no text to match them in.
Generated generate_without_cache(engine::Engine& engine, EngineShape shape,
                                 std::span<const GenerationRequest> requests, IdsToText text,
                                 const OnText& on_text = {});

// The same with a KV cache (Engine::reserve_cache, of the longest prompt and its new tokens):
// one prefill runs every prompt through the fused attention (the micro-batch's rows as long as
// the longest prompt, which seq_len must hold), then each decode step feeds each running
// sequence its last token at its position, which attends over the cache, so a step reads each
// weight once whatever the length. A prompt and its new tokens may take up to shape.positions.
// Throws UserError before any forward for a request that does not fit (check_fits against
// shape.positions), a cache the device has no room for (naming both), or stop strings without
// text.
Generated generate_with_cache(engine::Engine& engine, EngineShape shape,
                              std::span<const GenerationRequest> requests, IdsToText text,
                              const OnText& on_text = {});

}  // namespace strata::models::generate
