// A loss mask at the model level (a negative target is not in the loss: gpu::Ops::
// cross_entropy_forward), on the host device in fp32, for the GPT and a Llama: a masked position
// adds nothing to the loss or the gradients, and a masked prompt of noise gives the gradient of a
// reference that weighs each row's loss by hand and goes through no masking code
// (tests/models/row_weighted_ops.h), from random tokens and from a `messages` file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/data/chat_encoder.h"
#include "models/data/examples.h"
#include "models/data/text_tokens.h"
#include "models/gpt/gpt.h"
#include "models/llama/llama.h"
#include "tests/models/data_test_util.h"
#include "tests/models/model_gradient.h"
#include "tests/models/row_weighted_ops.h"
#include "tests/models/tiny_llama.h"
#include "tests/models/tiny_tokenizer.h"

namespace strata::models {
namespace {

using testing::GradientHarness;

// A model kind: how to make one (the same parameters, tokens and targets every time: the
// harness seeds them), its vocabulary and its sequence length.
struct ModelKind {
  std::string name;
  std::function<std::unique_ptr<engine::Model>()> make;
  std::int32_t vocab = 0;
  std::int64_t seq_len = 0;
};

std::vector<ModelKind> model_kinds() {
  return {{"gpt",
           [] {
             return std::make_unique<Gpt>(GptShape{1, 2, 16, 8, 256, 2});
           },
           256, 8},
          {"llama", [] { return std::make_unique<Llama>(testing::tiny_llama(2, false, false)); },
           50, 6}};
}

// Every parameter gradient of the harness's last backward, module after module.
std::vector<float> gradients(const GradientHarness& h) {
  std::vector<float> values;
  for (const gpu::DeviceBuffer& buffer : h.grads) {
    const float* first = buffer.as<float>();
    values.insert(values.end(), first, first + buffer.bytes() / 4);
  }
  return values;
}

// Equal values (+0 and -0 alike: a masked row's products are zeros of either sign).
void expect_same_values(const std::vector<float>& actual, const std::vector<float>& expected,
                        const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  std::size_t differ = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] == expected[i]) continue;
    if (differ++ == 0) first = i;
  }
  EXPECT_EQ(differ, 0u) << what << ": first at " << first << ", " << actual[first] << " vs "
                        << expected[first];
}

// The first `prompt` positions of each sequence are masked (the prompt of supervised
// fine-tuning); returns the rows left in the loss.
std::int64_t mask_prompts(std::vector<std::int32_t>& targets, std::int64_t seq_len,
                          std::int64_t prompt) {
  std::int64_t kept = 0;
  for (std::size_t row = 0; row < targets.size(); ++row) {
    const bool in_prompt = static_cast<std::int64_t>(row) % seq_len < prompt;
    if (in_prompt) targets[row] = -1;
    kept += in_prompt ? 0 : 1;
  }
  return kept;
}

// The prompt and the last position of each sequence masked. Other negative targets, and another
// input token at each last position (its logits change, and nothing after it reads it), leave the
// loss and every gradient bit for bit as they were; a changed target in the loss does not.
TEST(LossMask, AMaskedPositionAddsNoLossAndNoGradient) {
  for (const ModelKind& kind : model_kinds()) {
    SCOPED_TRACE(kind.name);
    GradientHarness h(kind.make(), kind.vocab);
    const std::int64_t rows = static_cast<std::int64_t>(h.targets.size());
    std::int64_t kept = mask_prompts(h.targets, kind.seq_len, 2);
    for (std::int64_t last = kind.seq_len - 1; last < rows; last += kind.seq_len) {
      h.targets[static_cast<std::size_t>(last)] = -1;
      --kept;
    }
    h.row_loss_gradient = 1.0f / static_cast<float>(kept);
    const float loss = h.loss();
    h.backward();
    const std::vector<float> expected = gradients(h);

    for (std::int64_t row = 0; row < rows; ++row) {
      auto& target = h.targets[static_cast<std::size_t>(row)];
      if (target < 0) target = static_cast<std::int32_t>(-100 - row);
    }
    for (std::int64_t last = kind.seq_len - 1; last < rows; last += kind.seq_len) {
      auto& token = h.tokens[static_cast<std::size_t>(last)];
      token = (token + 1) % kind.vocab;
    }
    EXPECT_EQ(h.loss(), loss);
    h.backward();
    expect_same_values(gradients(h), expected, "gradients with other masked targets and inputs");

    auto& answer = h.targets[static_cast<std::size_t>(kind.seq_len - 2)];
    answer = (answer + 1) % kind.vocab;
    EXPECT_NE(h.loss(), loss) << "a target in the loss changes it";
  }
}

// A prompt of noise tokens (the harness's random inputs and targets), masked: the gradient is the
// reference's, whose head seeds each row with a hand-built weight, 1 / N on the answer's rows and
// 0 on the prompt's, every target in place (no row masked, so no masking code runs). Equal
// values: the answer rows' arithmetic is the same, the prompt rows' products are zeros.
TEST(LossMask, AMaskedNoisePromptGivesTheGradientOfAHandWeightedReference) {
  for (const ModelKind& kind : model_kinds()) {
    SCOPED_TRACE(kind.name);
    constexpr std::int64_t prompt = 3;
    GradientHarness masked(kind.make(), kind.vocab);
    const std::vector<std::int32_t> noise_targets = masked.targets;
    const std::int64_t kept = mask_prompts(masked.targets, kind.seq_len, prompt);
    const float seed = 1.0f / static_cast<float>(kept);
    masked.row_loss_gradient = seed;
    masked.backward();

    GradientHarness reference(kind.make(), kind.vocab);
    ASSERT_EQ(reference.targets, noise_targets);
    const auto rows = static_cast<std::int64_t>(noise_targets.size());
    gpu::DeviceBuffer weights = reference.device->allocate(rows * 4, "row weights");
    gpu::DeviceBuffer targets = reference.device->allocate(rows * 4, "targets");
    for (std::int64_t row = 0; row < rows; ++row) {
      weights.as<float>()[row] = row % kind.seq_len < prompt ? 0.0f : seed;
      targets.as<std::int32_t>()[row] = noise_targets[static_cast<std::size_t>(row)];
    }
    reference.ops = std::make_unique<gpu::testing::RowWeightedOps>(
        std::move(reference.ops), weights.as<float>(), targets.as<std::int32_t>());
    reference.backward();
    expect_same_values(gradients(masked), gradients(reference), "masked vs hand-weighted");

    // Not the gradient of the whole sequence's mean: the prompt's rows do weigh there.
    GradientHarness whole(kind.make(), kind.vocab);
    whole.backward();
    EXPECT_NE(gradients(whole), gradients(masked));
  }
}

// The same from a file: a step on a `messages` JSON Lines file whose prompts are noise, each
// conversation a row (packing off), gives the gradient of the hand-weighted reference that keeps
// every target in place and weighs the assistant's tokens alone.
TEST(LossMask, AMessagesFileOfNoisePromptsGivesTheGradientOfItsAnswersAlone) {
  const testing::TempFolder folder("strata-chat-gradient");
  const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::load(
      testing::write_chat_tokenizer(folder.path / "model", testing::kChatMlTemplate));
  const std::optional<ChatEncoder> chat = ChatEncoder::for_tokenizer(tokenizer);
  TokenizeOptions options;
  options.chat = &*chat;
  const std::filesystem::path inputs[] = {folder.write(
      "chat.jsonl",
      R"({"messages": [{"role": "user", "content": "qz%Vk8!rw$Tp"}, {"role": "assistant", "content": "hello"}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "x?4Lm;bd&Zo"}, {"role": "assistant", "content": "hello he"}]})"
      "\n")};
  const TokenizedText text = tokenize_files(inputs, tokenizer, options);
  const TokenView with_mask = TokenView(text.ids).with_mask(text.mask);
  const std::vector<std::size_t> starts = example_starts(with_mask);
  ASSERT_EQ(starts.size(), 2u);

  const GptShape shape{1, 2, 16, 40, 264, 2};
  const std::size_t rows = 2 * 40;
  const std::size_t examples[] = {0, 1};
  std::vector<std::int32_t> tokens(rows), masked_targets(rows), all_targets(rows);
  fill_example_rows(with_mask, starts, examples, 40, tokens, masked_targets);
  fill_example_rows(
      TokenView(text.ids).with_mask(std::vector<std::uint8_t>(text.ids.size(), kInLoss)), starts,
      examples, 40, tokens, all_targets);
  const auto kept = std::count_if(masked_targets.begin(), masked_targets.end(),
                                  [](std::int32_t t) { return t >= 0; });
  EXPECT_EQ(kept, 2 + 4);  // "hello" <|im_end|>; then "hello", " ", "he", <|im_end|>
  const float seed = 1.0f / static_cast<float>(kept);

  GradientHarness masked(std::make_unique<Gpt>(shape), 264);
  masked.tokens = tokens;
  masked.targets = masked_targets;
  masked.row_loss_gradient = seed;
  masked.backward();

  GradientHarness reference(std::make_unique<Gpt>(shape), 264);
  reference.tokens = tokens;
  gpu::DeviceBuffer weights = reference.device->allocate(rows * 4, "row weights");
  gpu::DeviceBuffer targets = reference.device->allocate(rows * 4, "targets");
  for (std::size_t row = 0; row < rows; ++row) {
    weights.as<float>()[row] = masked_targets[row] >= 0 ? seed : 0.0f;
    // The prompt's own next tokens (noise), and 0 past each conversation: weighed 0, not masked.
    targets.as<std::int32_t>()[row] = std::max(all_targets[row], 0);
  }
  reference.targets.assign(targets.as<std::int32_t>(), targets.as<std::int32_t>() + rows);
  reference.ops = std::make_unique<gpu::testing::RowWeightedOps>(
      std::move(reference.ops), weights.as<float>(), targets.as<std::int32_t>());
  reference.backward();
  expect_same_values(gradients(masked), gradients(reference), "messages file vs hand-weighted");
}

}  // namespace
}  // namespace strata::models
