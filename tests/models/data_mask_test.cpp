// Fine-tuning data with the loss on the answers: prompt and completion lines, conversations
// rendered by the folder's chat template, the mask file beside the ids, and windows packed or one
// example each.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/data/chat_encoder.h"
#include "models/data/examples.h"
#include "models/data/loss_mask.h"
#include "models/data/text_tokens.h"
#include "models/data/token_cache.h"
#include "models/data/token_dataset.h"
#include "tests/models/data_test_util.h"
#include "tests/models/tiny_tokenizer.h"

namespace strata::models {
namespace {

using ::testing::HasSubstr;
using testing::kChatMlTemplate;
using testing::refusal_of;
using testing::temp_file;
using testing::write_chat_tokenizer;
using tokenizer::Tokenizer;

struct Folder : testing::TempFolder {
  Folder() : TempFolder("strata-mask-data") {}
};

// The ids the loss counts, in order.
std::vector<std::int32_t> in_loss(const TokenizedText& text) {
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < text.ids.size(); ++i) {
    if ((text.mask[i] & kInLoss) != 0) ids.push_back(static_cast<std::int32_t>(text.ids[i]));
  }
  return ids;
}

struct ChatFolder {
  Folder folder;
  Tokenizer tokenizer =
      Tokenizer::load(write_chat_tokenizer(folder.path / "model", kChatMlTemplate));
  std::optional<ChatEncoder> chat = ChatEncoder::for_tokenizer(tokenizer);

  TokenizedText tokenize(const std::string& lines) const {
    TokenizeOptions options;
    options.chat = chat ? &*chat : nullptr;
    const std::filesystem::path inputs[] = {folder.write("train.jsonl", lines)};
    return tokenize_files(inputs, tokenizer, options);
  }
  std::string decode(const std::vector<std::int32_t>& ids) const {
    return tokenizer.decode(ids, false);
  }
};

TEST(DataMask, APromptAndCompletionPutTheLossOnTheCompletionAndItsEos) {
  const ChatFolder model;
  const TokenizedText text =
      model.tokenize(R"({"prompt": "say hello: ", "completion": "hello hello"})"
                     "\n");
  const std::int32_t eos = *model.tokenizer.eos_id();
  std::vector<std::int32_t> expected = model.tokenizer.encode("say hello: hello hello");
  expected.push_back(eos);
  EXPECT_EQ(std::vector<std::int32_t>(text.ids.begin(), text.ids.end()), expected);
  EXPECT_EQ(model.decode(in_loss(text)), "hello hello<|endoftext|>");
  EXPECT_EQ(text.mask.front(), kExampleStart);  // the prompt's first token starts the example
}

TEST(DataMask, TextLinesKeepEveryTokenInTheLoss) {
  const ChatFolder model;
  const TokenizedText text = model.tokenize(R"({"text": "hello"})"
                                            "\n"
                                            R"({"text": "he"})"
                                            "\n");
  EXPECT_EQ(in_loss(text).size(), text.ids.size());
  EXPECT_EQ(example_starts(TokenView(text.ids).with_mask(text.mask)),
            (std::vector<std::size_t>{0, 2}));  // "hello" EOS, then "he" EOS
}

TEST(DataMask, AConversationPutsTheLossOnTheAssistantTurnsAndTheirEndOfTurn) {
  const ChatFolder model;
  ASSERT_TRUE(model.chat);
  const TokenizedText text = model.tokenize(
      R"({"messages": [{"role": "system", "content": "be brief"},)"
      R"( {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},)"
      R"( {"role": "user", "content": "again"}, {"role": "assistant", "content": "hello hello"}]})"
      "\n");
  EXPECT_EQ(model.decode(in_loss(text)), "hello<|im_end|>hello hello<|im_end|>");
  EXPECT_EQ(*model.chat->end_of_turn(), *model.tokenizer.token_to_id("<|im_end|>"));
}

// As Mistral's templates do, the system message goes into the last user turn: the conversation
// before an assistant's message renders other than the whole does, and the turn is found by its
// content.
TEST(DataMask, ATurnIsFoundWhereATemplateMovesTheSystemMessage) {
  const Folder folder;
  const Tokenizer tokenizer = Tokenizer::load(write_chat_tokenizer(
      folder.path / "model",
      "{%- set ns = namespace(system='') %}{%- if messages[0]['role'] == 'system' %}{%- set "
      "ns.system = messages[0]['content'] %}{%- endif %}{%- for m in messages if m['role'] != "
      "'system' %}{%- if m['role'] == 'user' %}{{ '<|im_start|>' }}{%- if loop.last and "
      "ns.system %}{{ ns.system + ' ' }}{%- endif %}{{ m['content'] + '<|im_end|>' }}{%- else "
      "%}{{ m['content'] + '<|endoftext|>' }}{%- endif %}{%- endfor %}"));
  const std::optional<ChatEncoder> chat = ChatEncoder::for_tokenizer(tokenizer);
  const ChatEncoding encoding = chat->encode(
      nlohmann::ordered_json::parse(
          R"([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},)"
          R"( {"role": "assistant", "content": "hello"}, {"role": "user", "content": "he"}])"),
      nullptr, false);
  EXPECT_EQ(encoding.text,
            "<|im_start|>hi<|im_end|>hello<|endoftext|><|im_start|>be brief "
            "he<|im_end|>");
  std::vector<std::int32_t> answer;
  for (std::size_t i = 0; i < encoding.ids.size(); ++i) {
    if (encoding.in_loss[i] != 0) answer.push_back(encoding.ids[i]);
  }
  EXPECT_EQ(tokenizer.decode(answer), "hello<|endoftext|>");
}

TEST(DataMask, ChatEncodingMatchesTheRenderedTextAndItsGenerationPrompt) {
  const ChatFolder model;
  const nlohmann::json messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
  const ChatEncoding encoding = model.chat->encode(messages, nullptr, true);
  EXPECT_EQ(encoding.text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(encoding.ids, model.tokenizer.encode(encoding.text, false));
  EXPECT_EQ(encoding.in_loss, std::vector<std::uint8_t>(encoding.ids.size(), 0));
}

TEST(DataMask, PromptAndCompletionMessagesTrainOnlyTheCompletion) {
  const ChatFolder model;
  const TokenizedText text = model.tokenize(
      R"({"prompt": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "he"},)"
      R"( {"role": "user", "content": "more"}], "completion": [{"role": "assistant", "content": )"
      R"("hello"}]})"
      "\n");
  EXPECT_EQ(model.decode(in_loss(text)), "hello<|im_end|>");
}

TEST(DataMask, ALineWithNoKnownFieldIsRefusedNamingFileLineAndFields) {
  const ChatFolder model;
  const std::string refused = refusal_of([&] {
    model.tokenize(R"({"text": "ok"})"
                   "\n"
                   R"({"question": "q", "answer": "a"})"
                   "\n");
  });
  EXPECT_THAT(refused, HasSubstr("train.jsonl line 2 has none of the fields strata trains on"));
  EXPECT_THAT(refused, HasSubstr("\"question\", \"answer\""));
  EXPECT_THAT(refused, HasSubstr("fix: give each line"));
}

TEST(DataMask, MismatchedPromptAndCompletionAreRefused) {
  const ChatFolder model;
  const std::string refused = refusal_of([&] {
    model.tokenize(R"({"prompt": "q", "completion": [{"role": "assistant"}]})"
                   "\n");
  });
  EXPECT_THAT(refused, HasSubstr("line 1 has a \"prompt\" (string) and a \"completion\" (array)"));
}

TEST(DataMask, AConversationTheTemplateRefusesIsRefusedNamingTheLine) {
  const Folder folder;
  const Tokenizer tokenizer = Tokenizer::load(write_chat_tokenizer(
      folder.path / "model",
      "{% if messages[0]['role'] != 'user' %}{{ raise_exception('the first message must be the "
      "user\\'s') }}{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}"));
  const std::optional<ChatEncoder> chat = ChatEncoder::for_tokenizer(tokenizer);
  TokenizeOptions options;
  options.chat = &*chat;
  const std::filesystem::path inputs[] = {
      folder.write("chat.jsonl", R"({"messages": [{"role": "assistant", "content": "x"}]})")};
  const std::string refused = refusal_of([&] { tokenize_files(inputs, tokenizer, options); });
  EXPECT_THAT(refused, HasSubstr("chat.jsonl line 1: the chat template refuses the conversation"));
  EXPECT_THAT(refused, HasSubstr("the first message must be the user's"));
}

TEST(DataMask, AConversationWithoutATemplateIsRefusedNamingTheFix) {
  const Folder folder;
  const Tokenizer tokenizer = Tokenizer::load(testing::write_tiny_tokenizer(folder.path / "m"));
  EXPECT_FALSE(ChatEncoder::for_tokenizer(tokenizer));
  const std::filesystem::path inputs[] = {
      folder.write("chat.jsonl", R"({"messages": [{"role": "user", "content": "x"}]})")};
  const std::string refused = refusal_of([&] { tokenize_files(inputs, tokenizer, {}); });
  EXPECT_THAT(refused, HasSubstr("chat.jsonl line 1 is a conversation, but the folder"));
  EXPECT_THAT(refused, HasSubstr("fix: put the model's chat_template.jinja"));
}

TEST(DataMask, TheTokenFileCarriesItsMaskAndTargetsLeaveThePromptOut) {
  const ChatFolder model;
  TokenizeOptions options;
  const std::filesystem::path inputs[] = {
      model.folder.write("pc.jsonl", R"({"prompt": "he", "completion": "hello"})"
                                     "\n")};
  const std::filesystem::path out = model.folder.path / "pc.bin";
  const TokenFileWritten written =
      tokenize_to_file(inputs, model.tokenizer, options, out, MaskFileWhen::some_left_out);
  ASSERT_TRUE(written.mask);
  const TokenFile file = open_token_file(out, "", "strata.data.path");
  ASSERT_TRUE(file.tokens.has_mask());
  // "he" "hello" EOS: the first target ("hello") and the EOS count, and nothing predicts "he".
  std::vector<std::int32_t> targets(2);
  file.tokens.copy_targets(1, targets);
  EXPECT_EQ(targets, (std::vector<std::int32_t>{259, *model.tokenizer.eos_id()}));
  std::vector<std::int32_t> first(1);
  file.tokens.copy_targets(0, first);
  EXPECT_EQ(first[0], kIgnoredTarget);
}

TEST(DataMask, TextAloneWritesNoMaskAndRemovesAStaleOne) {
  const ChatFolder model;
  const std::filesystem::path out = model.folder.path / "t.bin";
  std::ofstream(mask_path(out)) << "stale";
  const std::filesystem::path inputs[] = {model.folder.write("t.txt", "hello")};
  const TokenFileWritten written =
      tokenize_to_file(inputs, model.tokenizer, {}, out, MaskFileWhen::some_left_out);
  EXPECT_FALSE(written.mask);
  EXPECT_FALSE(std::filesystem::exists(mask_path(out)));
}

TEST(DataMask, AMaskOfAnotherCountIsRefusedNamingBothFiles) {
  const Folder folder;
  const std::filesystem::path bin =
      folder.write("x.bin", testing::llmc_file(std::vector<std::uint16_t>{1, 2, 3}));
  const std::uint8_t mask[2] = {1, 1};
  const auto header = mask_header(2, {});
  std::ofstream out(mask_path(bin), std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), header.size());
  out.write(reinterpret_cast<const char*>(mask), 2);
  out.close();
  const std::string refused = refusal_of([&] { open_token_file(bin, "", "strata.data.path"); });
  EXPECT_THAT(refused, HasSubstr("x.bin.mask is not the loss mask of"));
  EXPECT_THAT(refused, HasSubstr("each of its 3 tokens"));
}

// Two examples of 3 and 6 tokens, the first token of each a prompt.
struct TwoExamples {
  std::vector<std::uint32_t> ids{10, 11, 12, 20, 21, 22, 23, 24, 25};
  std::vector<std::uint8_t> mask{kExampleStart, 1, 1, kExampleStart, 1, 1, 1, 1, 1};
  TokenView view() const { return TokenView(ids).with_mask(mask); }
};

TEST(DataMask, WithPackingOffEachRowIsOneExamplePaddedOutOfTheLoss) {
  const TwoExamples data;
  const std::vector<std::size_t> starts = example_starts(data.view());
  std::vector<std::int32_t> inputs(8);
  std::vector<std::int32_t> targets(8);
  const std::size_t examples[] = {0, 1};
  fill_example_rows(data.view(), starts, examples, 4, inputs, targets);
  EXPECT_EQ(inputs, (std::vector<std::int32_t>{10, 11, 0, 0, 20, 21, 22, 23}));
  EXPECT_EQ(targets, (std::vector<std::int32_t>{11, 12, -1, -1, 21, 22, 23, 24}));
}

TEST(DataMask, LongFineTuningExamplesAreCutAndCounted) {
  const TwoExamples data;
  const CutExamples cut = cut_long_examples(data.view(), 4);
  EXPECT_EQ(cut.examples, 2);
  EXPECT_EQ(cut.cut, 1);
  std::vector<std::int32_t> ids(cut.tokens.size());
  cut.tokens.copy(0, ids);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{10, 11, 12, 20, 21, 22, 23}));
}

TEST(DataMask, PlainTextRunsOnAcrossWindowsUncut) {
  const std::vector<std::uint32_t> ids{1, 2, 3, 4, 5, 6};
  const std::vector<std::uint8_t> mask{kInLoss | kExampleStart, 1, 1, 1, 1, 1};
  const CutExamples cut = cut_long_examples(TokenView(ids).with_mask(mask), 3);
  EXPECT_EQ(cut.examples, 0);
  EXPECT_EQ(cut.tokens.size(), ids.size());
}

TEST(DataMask, PackingOffIsRefusedForATokenFileWithoutItsMask) {
  const Folder folder;
  std::vector<std::uint16_t> tokens(64, 1);
  const auto bin = folder.write("plain.bin", testing::llmc_file(tokens));
  TokenDataset dataset = TokenDataset::from_file(bin, 0.25);
  const std::string refused = refusal_of([&] { dataset.shape_examples(8, false); });
  EXPECT_THAT(refused, HasSubstr("\"packing\": false}}} reads one example per window"));
  EXPECT_THAT(refused, HasSubstr("fix: give the text file itself"));
}

TEST(DataMask, TheCacheIsMadeAgainWhenItsMaskIsMissing) {
  const ChatFolder model;
  const auto text = model.folder.write("c.jsonl", R"({"prompt": "he", "completion": "hello"})");
  const std::filesystem::path cache =
      cached_tokens(text, model.tokenizer, model.chat ? &*model.chat : nullptr, {});
  ASSERT_TRUE(std::filesystem::exists(mask_path(cache)));
  std::filesystem::remove(mask_path(cache));
  cached_tokens(text, model.tokenizer, &*model.chat, {});
  EXPECT_TRUE(std::filesystem::exists(mask_path(cache)));
}

}  // namespace
}  // namespace strata::models
