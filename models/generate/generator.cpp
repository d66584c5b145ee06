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

// The sequences of one batch as they grow, and the batch's time: until every sequence had its
// first new token (the prefill), then the rest.
class Batch {
 public:
  Batch(std::span<const GenerationRequest> requests, IdsToText text, const OnText& on_text)
      : on_text_(on_text), start_(Clock::now()) {
    for (std::size_t i = 0; i < requests.size(); ++i) {
      sequences_.emplace_back(requests[i], text);
      running_.push_back(i);
    }
  }

  const std::vector<std::size_t>& running() const { return running_; }
  const Sequence& sequence(std::size_t index) const { return sequences_[index]; }

  // Each running sequence's next token from `logits`: a row of the vocabulary per running
  // sequence, in running() order. Those that stop leave running().
  void advance(std::span<const float> logits) {
    const std::size_t vocab = logits.size() / running_.size();
    std::vector<std::size_t> still_running;
    for (std::size_t row = 0; row < running_.size(); ++row) {
      Sequence& sequence = sequences_[running_[row]];
      if (!sequence.next(logits.subspan(vocab * row, vocab), running_[row], on_text_))
        still_running.push_back(running_[row]);
    }
    running_ = std::move(still_running);
    if (!first_tokens_) first_tokens_ = Clock::now();
  }

  Generated finish() {
    Generated generated;
    for (Sequence& sequence : sequences_)
      generated.sequences.push_back(std::move(sequence.result()));
    generated.prefill_s = seconds(*first_tokens_ - start_);
    generated.decode_s = seconds(Clock::now() - *first_tokens_);
    return generated;
  }

 private:
  std::vector<Sequence> sequences_;
  std::vector<std::size_t> running_;
  const OnText& on_text_;
  Clock::time_point start_;
  std::optional<Clock::time_point> first_tokens_;
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
  for (std::size_t i = 0; i < requests.size(); ++i) {
    std::ranges::copy(requests[i].prompt,
                      tokens.begin() + static_cast<std::ptrdiff_t>(i) * shape.seq_len);
  }
  Batch batch(requests, text, on_text);
  std::vector<std::int64_t> ends;
  while (!batch.running().empty()) {
    const std::vector<std::size_t> running = batch.running();
    ends.clear();
    for (std::size_t i : running)
      ends.push_back(static_cast<std::int64_t>(i) * shape.seq_len + batch.sequence(i).length() - 1);
    batch.advance(engine.logits_at(tokens, ends));
    for (std::size_t row = 0; row < running.size(); ++row)
      tokens[static_cast<std::size_t>(ends[row] + 1)] = batch.sequence(running[row]).last();
  }
  return batch.finish();
}

Generated generate_with_cache(engine::Engine& engine, EngineShape shape,
                              std::span<const GenerationRequest> requests, IdsToText text,
                              const OnText& on_text) {
  STRATA_ASSERT(!requests.empty() && std::ssize(requests) <= shape.rows);
  std::int64_t prompt_tokens = 0, positions = 0;
  for (const GenerationRequest& request : requests) {
    check_request(request, shape.positions, text);
    prompt_tokens = std::max(prompt_tokens, std::ssize(request.prompt));
    positions = std::max(positions, std::ssize(request.prompt) + request.max_new_tokens);
  }
  STRATA_ASSERT(prompt_tokens <= shape.seq_len);
  engine.reserve_cache(positions);
  // The prefill: every prompt from position 0, the micro-batch's rows prompt_tokens long.
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(shape.rows * prompt_tokens), 0);
  std::vector<std::int32_t> start(static_cast<std::size_t>(shape.rows), 0);
  std::vector<std::int64_t> rows;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    std::ranges::copy(requests[i].prompt,
                      inputs.begin() + static_cast<std::ptrdiff_t>(i) * prompt_tokens);
    rows.push_back(static_cast<std::int64_t>(i) * prompt_tokens + std::ssize(requests[i].prompt) -
                   1);
  }
  Batch batch(requests, text, on_text);
  batch.advance(engine.cached_logits(inputs, prompt_tokens, start, rows));
  // Decode steps: each running sequence's last token at its position; the other rows (stopped,
  // or beyond the requests) run token 0 at position 0, whose cache no one reads again.
  while (!batch.running().empty()) {
    inputs.assign(static_cast<std::size_t>(shape.rows), 0);
    start.assign(static_cast<std::size_t>(shape.rows), 0);
    rows.clear();
    for (std::size_t i : batch.running()) {
      inputs[i] = batch.sequence(i).last();
      start[i] = static_cast<std::int32_t>(batch.sequence(i).length() - 1);
      rows.push_back(static_cast<std::int64_t>(i));
    }
    batch.advance(engine.cached_logits(inputs, 1, start, rows));
  }
  return batch.finish();
}

}  // namespace strata::models::generate
