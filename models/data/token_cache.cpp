#include "models/data/token_cache.h"

#include <fmt/format.h>

#include <array>
#include <fstream>

#include "base/error.h"
#include "models/data/llmc_writer.h"
#include "models/data/loss_mask.h"

namespace strata::models {
namespace {

// "strc": marks header words 3 onwards as a strata cache key.
constexpr std::int32_t kCacheMarker = 0x63727473;
constexpr std::size_t kKeyWords = 8;
using CacheKey = std::array<std::int32_t, kKeyWords>;

void put_u64(CacheKey& key, std::size_t at, std::uint64_t value) {
  key[at] = static_cast<std::int32_t>(static_cast<std::uint32_t>(value));
  key[at + 1] = static_cast<std::int32_t>(static_cast<std::uint32_t>(value >> 32));
}

CacheKey key_of(const std::filesystem::path& text, const tokenizer::Tokenizer& tokenizer,
                const ChatEncoder* chat) {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(text, error);
  const auto modified = std::filesystem::last_write_time(text, error);
  if (error) {
    throw UserError(fmt::format("{} cannot be read: {}", text.string(), error.message()),
                    "give the path of a readable .txt or .jsonl file", 2);
  }
  CacheKey key{};
  key[0] = kCacheMarker;
  put_u64(key, 1, tokenizer.content_hash() ^ (chat != nullptr ? chat->template_hash() : 0));
  put_u64(key, 3, static_cast<std::uint64_t>(size));
  put_u64(key, 5, static_cast<std::uint64_t>(modified.time_since_epoch().count()));
  key[7] = static_cast<std::int32_t>(tokenizer.vocab_size());
  return key;
}

// Whether `cache` and its mask exist and were made under `key`.
bool cache_matches(const std::filesystem::path& cache, const CacheKey& key) {
  std::ifstream in(cache, std::ios::binary);
  std::array<std::int32_t, 3 + kKeyWords> header{};
  if (!in.read(reinterpret_cast<char*>(header.data()), sizeof(header))) return false;
  if (!std::equal(key.begin(), key.end(), header.begin() + 3)) return false;
  std::ifstream mask(mask_path(cache), std::ios::binary);
  std::array<std::int32_t, kMaskHeaderBytes / 4> mask_head{};
  if (!mask.read(reinterpret_cast<char*>(mask_head.data()), sizeof(mask_head))) return false;
  return std::equal(key.begin(), key.end(), mask_head.begin() + 4);
}

}  // namespace

std::filesystem::path token_cache_path(const std::filesystem::path& text) {
  std::filesystem::path cache = text;
  cache += ".strata-tokens.bin";
  return cache;
}

std::filesystem::path cached_tokens(const std::filesystem::path& text,
                                    const tokenizer::Tokenizer& tokenizer, const ChatEncoder* chat,
                                    const TokenizeProgress& progress) {
  const CacheKey key = key_of(text, tokenizer, chat);
  const std::filesystem::path cache = token_cache_path(text);
  if (cache_matches(cache, key)) return cache;
  TokenizeOptions options;
  options.progress = progress;
  options.chat = chat;
  const std::filesystem::path inputs[] = {text};
  try {
    tokenize_to_file(inputs, tokenizer, options, cache, MaskFileWhen::always, key);
  } catch (const TokenFileWriteError& error) {
    throw UserError(fmt::format("the token cache of {}: {}", text.string(), error.what()),
                    fmt::format("make the folder writable, or write the token file elsewhere with "
                                "`strata tokenize --tokenizer {} --output OUT.bin {}` and set "
                                "\"strata\": {{\"data\": {{\"path\": \"OUT.bin\"}}}}",
                                tokenizer.source(), text.string()),
                    error.exit_status());
  }
  return cache;
}

}  // namespace strata::models
