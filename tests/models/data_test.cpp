#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "base/error.h"
#include "models/data/byte_tokenizer.h"
#include "models/data/synthetic_corpus.h"
#include "models/data/token_dataset.h"
#include "models/data/token_file.h"
#include "tests/models/data_test_util.h"

namespace strata::models {
namespace {

using ::testing::HasSubstr;
using testing::llmc_file;
using testing::raw_bytes;
using testing::temp_file;
using testing::write_megatron;

TEST(SyntheticCorpus, SameSpecGivesSameBytes) {
  CorpusSpec spec;
  spec.size_bytes = 100'000;
  EXPECT_EQ(generate_corpus(spec).text, generate_corpus(spec).text);
  spec.seed = 99;
  EXPECT_NE(generate_corpus(CorpusSpec{.size_bytes = 100'000}).text, generate_corpus(spec).text);
}

// The floor must agree with the entropy measured on a long sample of the chain: the empirical
// conditional entropy of a word given the previous word, over the mean bytes per word.
TEST(SyntheticCorpus, FloorMatchesTheMeasuredEntropyRate) {
  CorpusSpec spec;
  spec.size_bytes = 4 << 20;
  SyntheticCorpus corpus = generate_corpus(spec);
  std::istringstream words(corpus.text);
  std::map<std::string, std::map<std::string, double>> counts;
  std::string previous, word;
  double word_count = 0, byte_count = 0;
  while (words >> word) {
    if (!previous.empty()) counts[previous][word] += 1;
    previous = word;
    word_count += 1;
    byte_count += static_cast<double>(word.size()) + 1;
  }
  double conditional_entropy = 0;
  for (const auto& [from, row] : counts) {
    double total = 0;
    for (const auto& [to, count] : row)
      total += count;
    for (const auto& [to, count] : row) {
      conditional_entropy -= count / word_count * std::log(count / total);
    }
  }
  double measured = conditional_entropy / (byte_count / word_count);
  EXPECT_NEAR(measured, corpus.entropy_floor_nats_per_byte, 0.01);
  EXPECT_GT(corpus.entropy_floor_nats_per_byte, 0.1);
  EXPECT_LT(corpus.entropy_floor_nats_per_byte, std::log(256.0));
}

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b)
    all += static_cast<char>(b);
  auto tokens = encode_bytes(all);
  ASSERT_EQ(tokens.size(), 256u);
  EXPECT_EQ(tokens[200], 200);
  EXPECT_EQ(decode_bytes(tokens), all);
}

TEST(TokenDataset, SplitsTheTailForValidation) {
  std::vector<std::uint16_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<std::uint16_t>(i % 251);
  auto dataset = TokenDataset::from_tokens(tokens, 0.1);
  EXPECT_EQ(dataset.train().size(), 900u);
  EXPECT_EQ(dataset.validation().size(), 100u);
  EXPECT_EQ(dataset.validation()[0], tokens[900]);
}

TEST(TokenDataset, ReadsTextFilesAsBytes) {
  auto path = temp_file("strata-text", "hello world, hello strata");
  auto dataset = TokenDataset::from_file(path, 0.2);
  EXPECT_EQ(dataset.train().size() + dataset.validation().size(), 25u);
  EXPECT_EQ(dataset.train()[0], static_cast<std::uint32_t>('h'));
  std::filesystem::remove(path);
}

TEST(TokenDataset, ReadsLlmcTokenFiles) {
  std::vector<std::uint16_t> tokens = {50256, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto path = temp_file("strata-tokens.bin", llmc_file(tokens));
  std::filesystem::rename(path, path.string() + ".bin");
  auto dataset = TokenDataset::from_file(path.string() + ".bin", 0.5);
  EXPECT_EQ(dataset.train()[0], 50256u);
  EXPECT_EQ(dataset.validation()[4], 9u);
  std::filesystem::remove(path.string() + ".bin");
}

TEST(TokenDataset, MissingFileNamesThePathAndTheKey) {
  try {
    TokenDataset::from_file("/nonexistent/corpus.txt", 0.1);
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("strata.data.path /nonexistent/corpus.txt"));
    EXPECT_THAT(error.fix(), HasSubstr("\"path\""));
  }
}

TEST(TokenDataset, BadMagicIsRefused) {
  auto path = std::filesystem::temp_directory_path() / "strata-bad-magic.bin";
  std::ofstream(path, std::ios::binary) << llmc_file<std::uint16_t>({1, 2, 3}, 12345);
  EXPECT_THROW(TokenDataset::from_file(path, 0.1), UserError);
  std::filesystem::remove(path);
}

TEST(TokenDataset, TruncatedTokenFileIsRefused) {
  auto path = std::filesystem::temp_directory_path() / "strata-truncated.bin";
  std::string bytes = llmc_file<std::uint16_t>({1, 2, 3, 4});
  bytes.resize(bytes.size() - 3);
  std::ofstream(path, std::ios::binary) << bytes;
  try {
    TokenDataset::from_file(path, 0.1);
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("truncated"));
  }
  std::filesystem::remove(path);
}

TEST(TokenDataset, RefusesSeqLenLongerThanASplit) {
  auto dataset = TokenDataset::from_tokens(std::vector<std::uint16_t>(100, 7), 0.1);
  dataset.source = "test";
  EXPECT_NO_THROW(dataset.check_fits(8, 256));
  try {
    dataset.check_fits(64, 256);
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("strata.model.seq_len 64 is too long"));
    // The validation split (10 tokens) is the shorter one: 9 inputs and a target fit.
    EXPECT_THAT(error.fix(), HasSubstr("\"seq_len\": 9}"));
    EXPECT_EQ(error.exit_status(), 2);
  }
}

TEST(TokenDataset, EmptyFileIsRefusedNamingTheKey) {
  auto path = temp_file("strata-empty", "");
  try {
    TokenDataset::from_file(path, 0.1);
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("strata.data.path"));
    EXPECT_THAT(error.what(), HasSubstr("is empty"));
    EXPECT_THAT(error.fix(), HasSubstr("\"path\""));
  }
  std::filesystem::remove(path);
}

TEST(TokenDataset, RefusesVocabSmallerThanTheTokens) {
  auto dataset = TokenDataset::from_tokens(std::vector<std::uint16_t>(100, 300), 0.1);
  EXPECT_THROW(dataset.check_fits(8, 256), UserError);
}

// llm.c's Llama 3 files: magic 20240801, version 7, uint32 tokens past 65,535.
TEST(TokenFile, ReadsLlmcVersion7WithWideTokens) {
  const std::vector<std::uint32_t> tokens = {128000, 1, 2, 128255, 70000, 5};
  const auto path = temp_file("strata-llama3", llmc_file(tokens, 20240801, 7));
  const auto bin = path.string() + ".bin";
  std::filesystem::rename(path, bin);
  const TokenFile file = open_token_file(bin, "", "strata.data.path");
  EXPECT_THAT(file.format, HasSubstr("v7"));
  ASSERT_EQ(file.tokens.size(), tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i)
    EXPECT_EQ(file.tokens[i], tokens[i]);
  EXPECT_NO_THROW(check_token_ids(file, 128256, ""));
  std::filesystem::remove(bin);
}

// A token at or past the vocabulary is named with its file and position.
TEST(TokenFile, TokenPastTheVocabularyIsRefusedNamingFileAndPosition) {
  const std::vector<std::uint32_t> tokens = {1, 2, 3, 50257, 4};
  const auto path = temp_file("strata-raw32", raw_bytes(tokens));
  const TokenFile file = open_token_file(path, "uint32", "strata.data.path");
  try {
    check_token_ids(file, 50257, "");
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr(path.string()));
    EXPECT_THAT(error.what(), HasSubstr("token id 50257 at token 3"));
    EXPECT_THAT(error.fix(), HasSubstr("\"vocab\": 50258"));
  }
  std::filesystem::remove(path);
}

// nanoGPT's train.bin: bare uint16 tokens, read as such when the dtype is given; without it a
// .bin must carry llm.c's header, and the refusal says how to read a raw array.
TEST(TokenFile, ReadsRawArraysWhenTheDtypeIsGiven) {
  const std::vector<std::uint16_t> tokens = {7, 8, 9, 65535};
  const auto path = temp_file("strata-nanogpt", raw_bytes(tokens));
  const auto bin = path.string() + ".bin";
  std::filesystem::rename(path, bin);
  const TokenFile file = open_token_file(bin, "uint16", "strata.data.path");
  ASSERT_EQ(file.tokens.size(), 4u);
  EXPECT_EQ(file.tokens[3], 65535u);
  try {
    open_token_file(bin, "", "strata.data.path");
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("not an llm.c token file"));
    EXPECT_THAT(error.fix(), HasSubstr("\"dtype\": \"uint16\""));
  }
  // 8 bytes are not a whole number of... they are; 7 bytes are not.
  const auto odd = temp_file("strata-odd", std::string(7, '\1'));
  EXPECT_THROW(open_token_file(odd, "uint16", "strata.data.path"), UserError);
  std::filesystem::remove(bin);
  std::filesystem::remove(odd);
}

// A Megatron-LM indexed dataset as preprocess_data.py writes it: the documents back to back are
// the stream; the prefix may be given bare or with .bin.
TEST(TokenFile, ReadsMegatronIndexedDatasets) {
  const std::vector<std::vector<std::uint16_t>> documents = {{1, 2, 3}, {4, 5}, {6, 7, 8, 9}};
  const auto prefix = temp_file("strata-megatron", "");
  std::filesystem::remove(prefix);
  write_megatron(prefix, documents, 8);
  for (const std::string& given : {prefix.string(), prefix.string() + ".bin"}) {
    const TokenFile file = open_token_file(given, "", "strata.data.path");
    EXPECT_THAT(file.format, HasSubstr("Megatron"));
    ASSERT_EQ(file.tokens.size(), 9u);
    for (std::size_t i = 0; i < 9; ++i)
      EXPECT_EQ(file.tokens[i], i + 1);
  }
  // A .bin that disagrees with its index is refused naming both.
  std::ofstream(prefix.string() + ".bin", std::ios::binary | std::ios::app) << "xx";
  try {
    open_token_file(prefix, "", "strata.data.path");
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr(".bin"));
    EXPECT_THAT(error.what(), HasSubstr(".idx lists 9 tokens"));
  }
  // A foreign dtype code (float32) is refused with the types strata reads.
  write_megatron(prefix, documents, 7);
  EXPECT_THROW(open_token_file(prefix, "", "strata.data.path"), UserError);
  std::filesystem::remove(prefix.string() + ".bin");
  std::filesystem::remove(prefix.string() + ".idx");
}

TEST(TokenDataset, ReadsASeparateValidationFile) {
  const auto train = temp_file("strata-train", raw_bytes(std::vector<std::uint16_t>(50, 3)));
  const auto validation = temp_file("strata-val", raw_bytes(std::vector<std::uint16_t>(20, 4)));
  const TokenDataset dataset = TokenDataset::from_file(train, 0.1, "uint16", validation);
  EXPECT_EQ(dataset.train().size(), 50u);
  EXPECT_EQ(dataset.validation().size(), 20u);
  EXPECT_EQ(dataset.validation()[0], 4u);
  EXPECT_THAT(dataset.source, HasSubstr(validation.string()));
  std::filesystem::remove(train);
  std::filesystem::remove(validation);
}

// "order": "sequential" reads micro-batch k at k x B x T, as llm.c's loader, and wraps when the
// next micro-batch would pass the split's end.
TEST(SequentialBatch, ReadsMicroBatchesInFileOrderAndWraps) {
  std::vector<std::uint32_t> split(41);  // (41 - 1) / (2 x 4) = 5 micro-batches per pass
  for (std::size_t i = 0; i < split.size(); ++i)
    split[i] = static_cast<std::uint32_t>(i);
  std::vector<std::int32_t> inputs(8), targets(8);
  for (std::int64_t k : {0, 3, 5, 7}) {
    sequential_batch(split, k, 2, 4, inputs, targets);
    const std::int32_t start = static_cast<std::int32_t>(k % 5 * 8);
    for (std::int32_t i = 0; i < 8; ++i) {
      EXPECT_EQ(inputs[static_cast<std::size_t>(i)], start + i) << "micro-batch " << k;
      EXPECT_EQ(targets[static_cast<std::size_t>(i)], start + i + 1) << "micro-batch " << k;
    }
  }
  // Global micro-batch order: steps, then accumulation steps, then ranks.
  EXPECT_EQ(global_micro_batch(1, 0, 2, 0, 2), 0);
  EXPECT_EQ(global_micro_batch(1, 0, 2, 1, 2), 1);
  EXPECT_EQ(global_micro_batch(1, 1, 2, 0, 2), 2);
  EXPECT_EQ(global_micro_batch(2, 0, 2, 1, 2), 5);
}

TEST(TokenDataset, SequentialOrderNeedsOneMicroBatch) {
  auto dataset = TokenDataset::from_tokens(std::vector<std::uint16_t>(100, 7), 0.1);
  EXPECT_NO_THROW(dataset.check_sequential_fits(2, 44));  // 89 <= 90
  try {
    dataset.check_sequential_fits(4, 32);
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("129 tokens"));
  }
}

TEST(CopyWindows, CoversEveryWholeWindowOnce) {
  std::vector<std::uint16_t> split(35);  // (35 - 1) / 8 = 4 windows
  for (std::size_t i = 0; i < split.size(); ++i)
    split[i] = static_cast<std::uint16_t>(i);
  EXPECT_EQ(window_count(split, 8), 4);
  std::vector<std::int32_t> inputs(16), targets(16);
  copy_windows(split, 2, 2, 8, inputs, targets);
  EXPECT_EQ(inputs.front(), 16);
  EXPECT_EQ(targets.back(), 32);
}

TEST(SampleSequences, IsDeterministicAndShiftsTargetsByOne) {
  std::vector<std::uint16_t> split(500);
  for (std::size_t i = 0; i < split.size(); ++i)
    split[i] = static_cast<std::uint16_t>(i);
  std::vector<std::int32_t> inputs(4 * 16), targets(4 * 16), again(4 * 16), other(4 * 16);
  sample_sequences(split, 7, 3, 0, 4, 16, inputs, targets);
  sample_sequences(split, 7, 3, 0, 4, 16, again, targets);
  EXPECT_EQ(inputs, again);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    EXPECT_EQ(targets[i], inputs[i] + 1);
  sample_sequences(split, 7, 3, 4, 4, 16, other, targets);
  EXPECT_NE(inputs, other);
}

// The rows every rank trains on at one step, in global order, for a split of the same global
// batch into ranks, micro-batches and micro-steps.
std::vector<std::int32_t> global_batch(std::span<const std::uint16_t> split, int world,
                                       std::int64_t micro_batch, std::int64_t micro_steps) {
  constexpr int seq_len = 8;
  std::vector<std::int32_t> all(static_cast<std::size_t>(world * micro_batch * micro_steps) *
                                seq_len);
  for (int rank = 0; rank < world; ++rank) {
    for (std::int64_t micro = 0; micro < micro_steps; ++micro) {
      const std::int64_t first = first_sequence(micro, rank, world, micro_batch);
      const auto at = static_cast<std::size_t>(first) * seq_len;
      const auto length = static_cast<std::size_t>(micro_batch) * seq_len;
      std::vector<std::int32_t> targets(length);
      sample_sequences(split, 11, 5, first, static_cast<int>(micro_batch), seq_len,
                       std::span(all).subspan(at, length), targets);
    }
  }
  return all;
}

// Data order: the global batch of a step is the same for any
// world size and micro-batch split of train_batch_size 8.
TEST(SampleSequences, TheGlobalBatchIsTheSameForAnySplit) {
  std::vector<std::uint16_t> split(10'000);
  for (std::size_t i = 0; i < split.size(); ++i)
    split[i] = static_cast<std::uint16_t>(i);
  const std::vector<std::int32_t> one_rank = global_batch(split, 1, 8, 1);
  EXPECT_EQ(global_batch(split, 1, 2, 4), one_rank);
  EXPECT_EQ(global_batch(split, 2, 2, 2), one_rank);
  EXPECT_EQ(global_batch(split, 4, 1, 2), one_rank);
  EXPECT_EQ(global_batch(split, 8, 1, 1), one_rank);
  EXPECT_EQ(first_sequence(1, 1, 2, 2), 6);  // rank 1's second micro-step: sequences 6-7
}

}  // namespace
}  // namespace strata::models
