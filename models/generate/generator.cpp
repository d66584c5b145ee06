#include "models/generate/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <span>

#include "base/assert.h"
#include "base/error.h"
#include "engine/engine.h"

namespace strata::models::generate {
namespace {

void check_fits(const GenerationRequest& request, EngineShape shape) {
  const auto prompt = std::ssize(request.prompt);
  if (prompt == 0) {
    throw UserError("the prompt has no tokens", "give a prompt of at least one token");
  }
  if (prompt + request.max_new_tokens > shape.seq_len) {
    throw UserError(
        fmt::format("the prompt's {} tokens and {} new tokens need {} positions, more than the "
                    "{} this model runs with",
                    prompt, request.max_new_tokens, prompt + request.max_new_tokens, shape.seq_len),
        fmt::format("shorten the prompt or ask for at most {} new tokens",
                    std::max<std::int64_t>(0, shape.seq_len - prompt)));
  }
}

}  // namespace

Generation generate_without_cache(engine::Engine& engine, EngineShape shape,
                                  const GenerationRequest& request, const TextSoFar& text) {
  STRATA_ASSERT(request.max_new_tokens > 0 && shape.rows > 0);
  check_fits(request, shape);
  const StopConditions stops(request.eos_ids, request.stop_strings, request.max_new_tokens);
  TokenSampler sampler(request.sampling, request.seed);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(shape.rows * shape.seq_len), 0);
  std::ranges::copy(request.prompt, tokens.begin());
  auto length = std::ssize(request.prompt);
  Generation generation;
  for (;;) {
    const std::int64_t last = length - 1;
    const std::vector<float> logits = engine.logits_at(tokens, std::span(&last, 1));
    const std::int32_t id = sampler.next(logits);
    generation.ids.push_back(id);
    tokens[static_cast<std::size_t>(length++)] = id;
    const std::optional<StopReason> reason = stops.after(id, text(id), std::ssize(generation.ids));
    if (reason) {
      generation.reason = *reason;
      return generation;
    }
  }
}

}  // namespace strata::models::generate
