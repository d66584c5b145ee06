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

namespace strata::models {
namespace {

using ::testing::HasSubstr;

std::filesystem::path temp_file(const std::string& name, const std::string& bytes) {
  auto path = std::filesystem::temp_directory_path() /
              (name + "-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string llmc_file(const std::vector<std::uint16_t>& tokens, std::int32_t magic = 20240520) {
  std::int32_t header[256] = {};
  header[0] = magic;
  header[1] = 1;
  header[2] = static_cast<std::int32_t>(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header), sizeof(header));
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return bytes;
}

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
  EXPECT_EQ(dataset.max_token(), 250);
}

TEST(TokenDataset, ReadsTextFilesAsBytes) {
  auto path = temp_file("strata-text", "hello world, hello strata");
  auto dataset = TokenDataset::from_file(path, 0.2);
  EXPECT_EQ(dataset.train().size() + dataset.validation().size(), 25u);
  EXPECT_EQ(dataset.train()[0], 'h');
  std::filesystem::remove(path);
}

TEST(TokenDataset, ReadsLlmcTokenFiles) {
  std::vector<std::uint16_t> tokens = {50256, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto path = temp_file("strata-tokens.bin", llmc_file(tokens));
  std::filesystem::rename(path, path.string() + ".bin");
  auto dataset = TokenDataset::from_file(path.string() + ".bin", 0.5);
  EXPECT_EQ(dataset.train()[0], 50256);
  EXPECT_EQ(dataset.max_token(), 50256);
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
  std::ofstream(path, std::ios::binary) << llmc_file({1, 2, 3}, 12345);
  EXPECT_THROW(TokenDataset::from_file(path, 0.1), UserError);
  std::filesystem::remove(path);
}

TEST(TokenDataset, TruncatedTokenFileIsRefused) {
  auto path = std::filesystem::temp_directory_path() / "strata-truncated.bin";
  std::string bytes = llmc_file({1, 2, 3, 4});
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
