#include "tools/train_sample.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/engine.h"
#include "tools/generate_prompts.h"

namespace strata::tools {
namespace {

namespace generate = models::generate;

// The default prompt: this many tokens from the start of the validation split, no more than half
// the sequence.
constexpr std::int64_t kDefaultPromptTokens = 8;

PromptInput sample_prompt(const SampleOptions& options, const models::TokenDataset& data,
                          std::int64_t seq_len) {
  if (!options.prompt.empty()) {
    return PromptInput{.text = options.prompt,
                       .ids = {},
                       .messages = {},
                       .tools = {},
                       .origin = "--sample-prompt"};
  }
  const models::TokenView split = data.validation();
  const auto count = static_cast<std::size_t>(
      std::min<std::int64_t>({kDefaultPromptTokens, std::max<std::int64_t>(1, seq_len / 2),
                              static_cast<std::int64_t>(split.size())}));
  std::vector<std::int32_t> ids(count);
  for (std::size_t i = 0; i < count; ++i)
    ids[i] = static_cast<std::int32_t>(split[i]);
  return PromptInput{.text = {},
                     .ids = std::move(ids),
                     .messages = {},
                     .tools = {},
                     .origin = "the validation split's first tokens"};
}

}  // namespace

TrainSamples::TrainSamples(const SampleOptions& options, const engine::Config& config,
                           const models::ModelPlan& plan, const models::TokenDataset& data)
    : every_(options.every), shape_{plan.batch(), plan.seq_len(), plan.seq_len()} {
  if (every_ <= 0) return;
  const models::TextTokenizing text = text_tokenizing(config, plan, tokenizers_);
  const std::string& hf_config = config.strata.model.hf_config;
  const PromptEncoding encoding{.tokenizer = hf_config.empty() ? nullptr : text.tokenizer(),
                                .chat = nullptr,
                                .bytes = hf_config.empty() && data.byte_level,
                                .vocab = plan.vocab(),
                                .model = hf_config.empty() ? "the built-in GPT" : hf_config};
  text_ = {.tokenizer = encoding.tokenizer, .bytes = encoding.bytes};
  request_.prompt = encode_prompt(sample_prompt(options, data, plan.seq_len()), encoding);
  const auto prompt = std::ssize(request_.prompt);
  request_.max_new_tokens = std::min(options.tokens, plan.seq_len() - prompt);
  if (request_.max_new_tokens < 1) {
    throw UserError(fmt::format("--sample-prompt is {} tokens, and the run's sequences of {} "
                                "leave no room for a new token after it",
                                prompt, plan.seq_len()),
                    fmt::format("give a prompt of fewer than {} tokens", plan.seq_len()), 2);
  }
}

void TrainSamples::reserve(engine::Engine& engine) const {
  if (every_ <= 0) return;
  try {
    engine.reserve_cache(std::ssize(request_.prompt) + request_.max_new_tokens);
  } catch (const UserError& error) {
    throw UserError(
        fmt::format("--sample-every {}: {}", every_, error.what()),
        fmt::format("drop --sample-every or sample fewer --sample-tokens, or {}", error.fix()),
        error.exit_status());
  }
}

bool TrainSamples::due(std::int64_t step, std::int64_t last_step) const {
  return every_ > 0 && (step % every_ == 0 || step == last_step);
}

std::string TrainSample::line() const {
  return fmt::format("{} -> {}", nlohmann::json(prompt).dump(),
                     nlohmann::json(continuation).dump());
}

TrainSample TrainSamples::take(engine::Engine& engine) const {
  const generate::Generated generated =
      generate::generate_with_cache(engine, shape_, std::span(&request_, 1), text_);
  const generate::Generation& sample = generated.sequences.front();
  if (!text_.has_text())
    return {fmt::format("{}", fmt::join(request_.prompt, " ")),
            fmt::format("{}", fmt::join(sample.ids, " "))};
  generate::TokenText prompt(text_);
  for (std::int32_t id : request_.prompt)
    prompt.add(id);
  return {prompt.text(), sample.text};
}

}  // namespace strata::tools
