#include "models/generate/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "engine/engine.h"

namespace strata::models::generate {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration duration) {
  return std::chrono::duration<double>(duration).count();
}

void check_request(const GenerationRequest& request, std::int64_t positions, IdsToText how) {
  STRATA_ASSERT(request.max_new_tokens > 0);
  check_fits(std::ssize(request.prompt), request.max_new_tokens, positions);
  if (!request.stop_strings.empty() && !how.has_text()) {
    throw UserError(
        "stop strings are matched against the generated text, and this model has no tokenizer "
        "to make text (no tokenizer.json beside its config.json)",
        "drop the stop strings, or put the model's tokenizer.json in its folder", 2);
  }
}

// One sequence of the batch as it grows: its sampler, its text, how much of that was shown, and
// whether it has stopped.
class Sequence {
 public:
  Sequence(const GenerationRequest& request, IdsToText how)
      : stops_(request.eos_ids, request.stop_strings, request.max_new_tokens),
        sampler_(request.sampling, request.seed),
        text_(how),
        length_(std::ssize(request.prompt)) {}

  // Chooses the next token from the logits at the sequence's end, shows what text it may, and
  // says whether the sequence has stopped.
  bool next(std::span<const float> logits, std::size_t index, const OnText& on_text) {
    const std::int32_t id = sampler_.next(logits);
    result_.ids.push_back(id);
    ++length_;
    const std::string_view text = text_.add(id);
    const std::optional<StopReason> reason = stops_.after(id, text, std::ssize(result_.ids));
    const std::size_t shown = stops_.shown(text, reason.has_value());
    if (shown > shown_ && on_text) on_text(index, text.substr(shown_, shown - shown_));
    shown_ = std::max(shown_, shown);
    if (!reason) return false;
    result_.reason = *reason;
    result_.text = std::string(text.substr(0, shown_));
    return true;
  }

  std::int64_t length() const { return length_; }
  std::int32_t last() const { return result_.ids.back(); }
  Generation& result() { return result_; }

 private:
  StopConditions stops_;
  TokenSampler sampler_;
  TokenText text_;
  std::size_t shown_ = 0;
  std::int64_t length_;  // prompt and new tokens
  Generation result_;
};

}  // namespace

double Generated::decode_tokens_per_s() const {
  std::int64_t after_first = 0;
  for (const Generation& sequence : sequences)
    after_first += std::max<std::int64_t>(0, std::ssize(sequence.ids) - 1);
  return decode_s > 0 ? static_cast<double>(after_first) / decode_s : 0.0;
}

void check_fits(std::int64_t prompt_tokens, std::int64_t max_new_tokens, std::int64_t positions) {
  if (prompt_tokens == 0) {
    throw UserError("the prompt has no tokens", "give a prompt of at least one token", 2);
  }
  if (prompt_tokens + max_new_tokens > positions) {
    throw UserError(
        fmt::format("the prompt's {} tokens and {} new tokens need {} positions, more than the "
                    "{} this model runs with",
                    prompt_tokens, max_new_tokens, prompt_tokens + max_new_tokens, positions),
        fmt::format("shorten the prompt or ask for at most {} new tokens",
                    std::max<std::int64_t>(0, positions - prompt_tokens)),
        2);
  }
}

Generated generate_without_cache(engine::Engine& engine, EngineShape shape,
                                 std::span<const GenerationRequest> requests, IdsToText text,
                                 const OnText& on_text) {
  STRATA_ASSERT(!requests.empty() && std::ssize(requests) <= shape.rows);
  for (const GenerationRequest& request : requests)
    check_request(request, shape.seq_len, text);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(shape.rows * shape.seq_len), 0);
  std::vector<Sequence> sequences;
  std::vector<std::size_t> running;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    std::ranges::copy(requests[i].prompt,
                      tokens.begin() + static_cast<std::ptrdiff_t>(i) * shape.seq_len);
    sequences.emplace_back(requests[i], text);
    running.push_back(i);
  }
  const Clock::time_point start = Clock::now();
  std::optional<Clock::time_point> first_tokens;
  std::vector<std::int64_t> ends;
  while (!running.empty()) {
    ends.clear();
    for (std::size_t i : running)
      ends.push_back(static_cast<std::int64_t>(i) * shape.seq_len + sequences[i].length() - 1);
    const std::vector<float> logits = engine.logits_at(tokens, ends);
    const std::size_t vocab = logits.size() / ends.size();
    std::vector<std::size_t> still_running;
    for (std::size_t row = 0; row < running.size(); ++row) {
      Sequence& sequence = sequences[running[row]];
      const bool stopped =
          sequence.next(std::span(logits).subspan(vocab * row, vocab), running[row], on_text);
      tokens[static_cast<std::size_t>(ends[row] + 1)] = sequence.last();
      if (!stopped) still_running.push_back(running[row]);
    }
    running = std::move(still_running);
    if (!first_tokens) first_tokens = Clock::now();
  }
  Generated generated;
  for (Sequence& sequence : sequences)
    generated.sequences.push_back(std::move(sequence.result()));
  generated.prefill_s = seconds(*first_tokens - start);
  generated.decode_s = seconds(Clock::now() - *first_tokens);
  return generated;
}

}  // namespace strata::models::generate
