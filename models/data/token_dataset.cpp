#include "models/data/token_dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "base/assert.h"
#include "base/error.h"
#include "models/data/byte_tokenizer.h"

namespace strata::models {
namespace {

constexpr std::int32_t kLlmcMagic = 20240520;
constexpr int kLlmcHeaderInts = 256;

const char* kDataFix =
    "set \"strata\": {\"data\": {\"path\": ...}} to a readable text file or an llm.c .bin token "
    "file, or remove the key to train on the built-in corpus";

std::string read_whole_file(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw UserError(
        fmt::format("strata.data.path {} does not exist or is not a regular file", path.string()),
        kDataFix, 2);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UserError(
        fmt::format("cannot open strata.data.path {}: {}", path.string(), std::strerror(errno)),
        kDataFix);
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::uint16_t> decode_llmc(const std::filesystem::path& path,
                                       const std::string& bytes) {
  constexpr std::size_t kHeaderBytes = kLlmcHeaderInts * sizeof(std::int32_t);
  std::int32_t header[kLlmcHeaderInts] = {};
  if (bytes.size() >= kHeaderBytes) std::memcpy(header, bytes.data(), kHeaderBytes);
  if (bytes.size() < kHeaderBytes || header[0] != kLlmcMagic || header[1] != 1) {
    throw UserError(fmt::format("{} is not an llm.c token file (expected magic {} and version 1 "
                                "in a 1024-byte header)",
                                path.string(), kLlmcMagic),
                    kDataFix);
  }
  std::size_t count = static_cast<std::size_t>(header[2]);
  if (header[2] < 0 || bytes.size() != kHeaderBytes + count * sizeof(std::uint16_t)) {
    throw UserError(fmt::format("{} is truncated or corrupt: its header says {} tokens but the "
                                "file holds {} bytes after the header",
                                path.string(), header[2], bytes.size() - kHeaderBytes),
                    kDataFix);
  }
  std::vector<std::uint16_t> tokens(count);
  std::memcpy(tokens.data(), bytes.data() + kHeaderBytes, count * sizeof(std::uint16_t));
  return tokens;
}

std::uint64_t mix(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

TokenDataset TokenDataset::from_tokens(std::vector<std::uint16_t> tokens,
                                       double validation_fraction) {
  STRATA_ASSERT(validation_fraction >= 0 && validation_fraction < 1);
  TokenDataset dataset;
  auto validation_count =
      static_cast<std::size_t>(static_cast<double>(tokens.size()) * validation_fraction);
  dataset.train_count_ = tokens.size() - validation_count;
  dataset.max_token_ = tokens.empty() ? 0 : *std::max_element(tokens.begin(), tokens.end());
  dataset.tokens_ = std::move(tokens);
  return dataset;
}

TokenDataset TokenDataset::from_file(const std::filesystem::path& path,
                                     double validation_fraction) {
  std::string bytes = read_whole_file(path);
  if (bytes.empty()) {
    throw UserError(fmt::format("strata.data.path {} is empty", path.string()), kDataFix, 2);
  }
  std::vector<std::uint16_t> tokens =
      path.extension() == ".bin" ? decode_llmc(path, bytes) : encode_bytes(bytes);
  TokenDataset dataset = from_tokens(std::move(tokens), validation_fraction);
  dataset.source = path.string();
  return dataset;
}

std::span<const std::uint16_t> TokenDataset::train() const {
  return {tokens_.data(), train_count_};
}

std::span<const std::uint16_t> TokenDataset::validation() const {
  return {tokens_.data() + train_count_, tokens_.size() - train_count_};
}

void TokenDataset::check_fits(int seq_len, int vocab) const {
  if (max_token_ >= vocab) {
    throw UserError(
        fmt::format("the data in {} holds token {} but strata.model.vocab is {}", source,
                    max_token_, vocab),
        fmt::format("set \"strata\": {{\"model\": {{\"vocab\": {}}}}} or more", max_token_ + 1), 2);
  }
  // A window is seq_len inputs plus the one target after them, from each split.
  auto needed = static_cast<std::size_t>(seq_len) + 1;
  std::size_t shortest = std::min(train().size(), validation().size());
  if (shortest >= needed) return;
  std::string fix =
      shortest >= 2 ? fmt::format(
                          "set \"strata\": {{\"model\": {{\"seq_len\": {}}}}} or less, or point "
                          "\"strata\": {{\"data\": {{\"path\"}}}} at a longer file",
                          shortest - 1)
                    : "point \"strata\": {\"data\": {\"path\"}} at a longer file (or raise "
                      "\"validation_fraction\" if the validation split is the short one)";
  throw UserError(
      fmt::format("strata.model.seq_len {} is too long for the data in {}: each split needs at "
                  "least {} tokens, the training split has {} and the validation split {}",
                  seq_len, source, needed, train().size(), validation().size()),
      fix, 2);
}

void sample_sequences(std::span<const std::uint16_t> split, std::uint64_t seed, std::int64_t step,
                      std::int64_t first_sequence, int count, int seq_len,
                      std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  auto window = static_cast<std::size_t>(seq_len) + 1;
  STRATA_ASSERT(split.size() >= window);
  STRATA_ASSERT(first_sequence >= 0);
  STRATA_ASSERT(inputs.size() ==
                static_cast<std::size_t>(count) * static_cast<std::size_t>(seq_len));
  STRATA_ASSERT(targets.size() == inputs.size());
  std::uint64_t starts = split.size() - window + 1;
  for (int row = 0; row < count; ++row) {
    // The sequence's index, spread by 2^10 before mixing, keys its window.
    auto sequence = static_cast<std::uint64_t>(first_sequence + row);
    std::uint64_t key = mix(
        seed ^ mix(static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ull ^ mix(sequence << 10)));
    std::size_t start = static_cast<std::size_t>(key % starts);
    for (int t = 0; t < seq_len; ++t) {
      std::size_t at = static_cast<std::size_t>(row) * static_cast<std::size_t>(seq_len) +
                       static_cast<std::size_t>(t);
      inputs[at] = split[start + static_cast<std::size_t>(t)];
      targets[at] = split[start + static_cast<std::size_t>(t) + 1];
    }
  }
}

std::int64_t first_sequence(std::int64_t micro_step, int rank, int world_size,
                            std::int64_t micro_batch) {
  STRATA_ASSERT(rank >= 0 && rank < world_size);
  return (micro_step * world_size + rank) * micro_batch;
}

}  // namespace strata::models
