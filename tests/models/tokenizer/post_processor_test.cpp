// Post-processors: the special tokens encoding adds around the text, and transformers' Llama and
// Gemma classes, which rebuild them from tokenizer_config.json. Expected tokens are those of the
// Hugging Face tokenizers (the Rust library) and of transformers' update_post_processor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/models/tokenizer/tokenizer_test_util.h"

namespace strata::models::tokenizer {
namespace {

using testing::added_token;
using ::testing::AllOf;
using testing::bpe_file;
using ::testing::HasSubstr;
using testing::Json;
using testing::refusal_of;
using testing::Strings;
using testing::TestTokenizer;
using testing::vocab_of;

// "<s>" and "</s>" as a Llama file has them, "<cls>" and "<sep>" as a BERT file would.
Json file_with(const Json& post_processor) {
  Json file = bpe_file(vocab_of({"<s>", "</s>", "<cls>", "<sep>", "a", "b"}));
  const Strings specials = {"<s>", "</s>", "<cls>", "<sep>"};  // ids 0 to 3
  for (std::size_t id = 0; id < specials.size(); ++id) {
    file["added_tokens"].push_back(added_token(specials[id], static_cast<std::int32_t>(id), true));
  }
  file["post_processor"] = post_processor;
  return file;
}

Json special_token(const char* name) {
  return {{"SpecialToken", {{"id", name}, {"type_id", 0}}}};
}

// TemplateProcessing's "single": <s> $A </s>.
Json bos_eos_template() {
  return {{"type", "TemplateProcessing"},
          {"single",
           {special_token("<s>"),
            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
            special_token("</s>")}},
          {"pair", Json::array()},
          {"special_tokens",
           {{"<s>", {{"id", "<s>"}, {"ids", {0}}, {"tokens", {"<s>"}}}},
            {"</s>", {{"id", "</s>"}, {"ids", {1}}, {"tokens", {"</s>"}}}}}}};
}

Json byte_level_processor() {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", true},
          {"trim_offsets", false},
          {"use_regex", true}};
}

TEST(PostProcessor, TemplateProcessingPutsItsTokensBeforeAndAfter) {
  const TestTokenizer tokenizer(file_with(bos_eos_template()));
  EXPECT_EQ(tokenizer.tokens("ab"), (Strings{"<s>", "a", "b", "</s>"}));
  EXPECT_EQ(tokenizer.tokens(""), (Strings{"<s>", "</s>"}));  // even around nothing
}

TEST(PostProcessor, WithoutSpecialTokensTheTextIsAlone) {
  const TestTokenizer tokenizer(file_with(bos_eos_template()));
  EXPECT_EQ(tokenizer.tokens("ab", false), (Strings{"a", "b"}));
}

TEST(PostProcessor, RobertaAndBertProcessingAddClsAndSep) {
  const Json roberta = {{"type", "RobertaProcessing"},
                        {"sep", {"<sep>", 3}},
                        {"cls", {"<cls>", 2}},
                        {"trim_offsets", true},
                        {"add_prefix_space", false}};
  EXPECT_EQ(TestTokenizer(file_with(roberta)).tokens("ab"), (Strings{"<cls>", "a", "b", "<sep>"}));
  const Json bert = {{"type", "BertProcessing"}, {"sep", {"<sep>", 3}}, {"cls", {"<cls>", 2}}};
  EXPECT_EQ(TestTokenizer(file_with(bert)).tokens("ab"), (Strings{"<cls>", "a", "b", "<sep>"}));
  EXPECT_EQ(TestTokenizer(file_with(bert)).tokens("ab", false), (Strings{"a", "b"}));
}

// ByteLevel only trims offsets, which strata does not report.
TEST(PostProcessor, ByteLevelLeavesTheIdsAlone) {
  EXPECT_EQ(TestTokenizer(file_with(byte_level_processor())).tokens("ab"), (Strings{"a", "b"}));
}

TEST(PostProcessor, SequenceRunsEachProcessor) {
  const Json sequence = {{"type", "Sequence"},
                         {"processors", {byte_level_processor(), bos_eos_template()}}};
  EXPECT_EQ(TestTokenizer(file_with(sequence)).tokens("ab"), (Strings{"<s>", "a", "b", "</s>"}));
}

// transformers' LlamaTokenizerFast (and Gemma's) rebuilds the post-processor from add_bos_token
// (default true) and add_eos_token (default false), whatever the file's says. transformers.js
// keeps the file's; strata follows transformers.
TEST(PostProcessor, LlamaConfigRebuildsItFromAddBosAndAddEos) {
  const Json file = file_with(bos_eos_template());
  const Json llama = {
      {"tokenizer_class", "LlamaTokenizerFast"}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
  EXPECT_EQ(TestTokenizer(file, llama).tokens("ab"), (Strings{"<s>", "a", "b"}));
  Json both = llama;
  both["add_eos_token"] = true;
  EXPECT_EQ(TestTokenizer(file, both).tokens("ab"), (Strings{"<s>", "a", "b", "</s>"}));
  Json eos_only = both;
  eos_only["add_bos_token"] = false;
  EXPECT_EQ(TestTokenizer(file, eos_only).tokens("ab"), (Strings{"a", "b", "</s>"}));
  EXPECT_EQ(TestTokenizer(file, eos_only).tokens("ab", false), (Strings{"a", "b"}));
  // Gemma's class does the same; a file without a post-processor gets one.
  Json gemma = llama;
  gemma["tokenizer_class"] = "GemmaTokenizer";
  EXPECT_EQ(TestTokenizer(file_with(nullptr), gemma).tokens("ab"), (Strings{"<s>", "a", "b"}));
}

TEST(PostProcessor, TheConfigNamesItsSpecialTokens) {
  const TestTokenizer tokenizer(file_with(nullptr),
                                {{"bos_token", "<s>"}, {"eos_token", {{"content", "</s>"}}}});
  EXPECT_EQ(tokenizer.get().bos_id(), 0);
  EXPECT_EQ(tokenizer.get().eos_id(), 1);
  EXPECT_EQ(TestTokenizer(file_with(nullptr)).get().eos_id(), std::nullopt);
}

TEST(PostProcessor, RefusesAConfigNamingATokenTheFileLacks) {
  EXPECT_THAT(refusal_of(file_with(nullptr), {{"eos_token", "<|end|>"}}),
              AllOf(HasSubstr("tokenizer_config.json beside tests/tokenizer.json"),
                    HasSubstr("\"eos_token\" names \"<|end|>\"")));
}

TEST(PostProcessor, RefusesATypeItDoesNotImplement) {
  EXPECT_THAT(
      refusal_of(file_with({{"type", "BlipProcessing"}})),
      HasSubstr("the post_processor of tests/tokenizer.json is of type \"BlipProcessing\""));
}

TEST(PostProcessor, RefusesATemplateNamingNoSpecialToken) {
  Json post_processor = bos_eos_template();
  post_processor["special_tokens"].erase("</s>");
  EXPECT_THAT(refusal_of(file_with(post_processor)),
              AllOf(HasSubstr("the post_processor of tests/tokenizer.json"), HasSubstr("single")));
}

}  // namespace
}  // namespace strata::models::tokenizer
