// The token formats of models/data/token_file.h: each file mapped, its header checked against
// its size, and its tokens viewed in place.
#include "models/data/token_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <system_error>

#include "base/assert.h"
#include "base/error.h"
#include "base/units.h"
#include "models/data/byte_tokenizer.h"
#include "models/data/text_documents.h"
#include "models/data/token_cache.h"

namespace strata::models {
namespace {

constexpr std::int32_t kLlmcMagicU16 = 20240520;  // llm.c's GPT-2 files: version 1, uint16
constexpr std::int32_t kLlmcMagicU32 = 20240801;  // llm.c's Llama 3 files: version 7, uint32
constexpr std::size_t kLlmcHeaderBytes = 256 * sizeof(std::int32_t);
constexpr char kMegatronMagic[] = "MMIDIDX\0\0";  // 9 bytes, the last two NULs included
constexpr std::size_t kMegatronMagicBytes = 9;
constexpr const char* kRawU32Format = "raw uint32 tokens";

// Reads a little-endian integer of type T at `at`; the caller has checked the bounds.
template <typename T>
T read_at(std::span<const std::byte> bytes, std::size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

[[noreturn]] void refuse(const std::filesystem::path& path, const std::string& what,
                         const std::string& fix) {
  throw UserError(fmt::format("{}: {}", path.string(), what), fix, 2);
}

// The fix for a file that cannot be read as tokens, in the words of the key (or option) that
// named it.
std::string data_fix(const std::string& key) {
  constexpr std::string_view kDataKey = "strata.data.";
  const std::string where =
      key.starts_with(kDataKey)
          ? fmt::format("\"strata\": {{\"data\": {{\"{}\": ...}}}}", key.substr(kDataKey.size()))
          : key;
  return fmt::format(
      "set {} to a text file, an llm.c .bin, a raw uint16/uint32 token array (with \"dtype\" "
      "set) or a Megatron-LM .bin/.idx pair (docs/data.md){}",
      where,
      key == "strata.data.path" ? ", or remove the key to train on the built-in corpus" : "");
}

base::MappedFile map(const std::filesystem::path& path, const std::string& key) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw UserError(
        fmt::format("{} {} does not exist or is not a regular file", key, path.string()),
        data_fix(key), 2);
  }
  try {
    return base::MappedFile::open(path);
  } catch (const std::system_error& failure) {
    throw UserError(fmt::format("{} {}: {}", key, path.string(), failure.what()),
                    "check the file's permissions and its disk", 2);
  }
}

TokenView view(std::span<const std::byte> bytes, bool wide) {
  if (wide) {
    return std::span(reinterpret_cast<const std::uint32_t*>(bytes.data()),
                     bytes.size() / sizeof(std::uint32_t));
  }
  return std::span(reinterpret_cast<const std::uint16_t*>(bytes.data()),
                   bytes.size() / sizeof(std::uint16_t));
}

void open_llmc(TokenFile& file, const std::string& key) {
  std::span<const std::byte> bytes = file.mapping.bytes();
  const std::int32_t magic = bytes.size() >= kLlmcHeaderBytes ? read_at<std::int32_t>(bytes, 0) : 0;
  const std::int32_t version =
      bytes.size() >= kLlmcHeaderBytes ? read_at<std::int32_t>(bytes, 4) : 0;
  const bool u16 = magic == kLlmcMagicU16 && version == 1;
  const bool u32 = magic == kLlmcMagicU32 && version == 7;
  if (!u16 && !u32) {
    refuse(file.path,
           fmt::format("not an llm.c token file: a 1024-byte header starting with magic {} "
                       "version 1 or magic {} version 7 was expected, found {} bytes, magic {}, "
                       "version {}",
                       kLlmcMagicU16, kLlmcMagicU32, bytes.size(), magic, version),
           fmt::format("for a raw token array (nanoGPT's train.bin) set \"strata\": {{\"data\": "
                       "{{\"dtype\": \"uint16\"}}}} (or \"uint32\"); else {}",
                       data_fix(key)));
  }
  const std::int32_t count = read_at<std::int32_t>(bytes, 8);
  const std::size_t width = u32 ? 4 : 2;
  const std::size_t body = bytes.size() - kLlmcHeaderBytes;
  if (count < 0 || body != static_cast<std::size_t>(count) * width) {
    refuse(file.path,
           fmt::format("truncated or corrupt: its header says {} tokens of {} bytes but the file "
                       "holds {} bytes after the header",
                       count, width, body),
           "write the file again (llm.c's dev/data scripts), or copy it again whole");
  }
  file.format = u32 ? "llm.c .bin v7 (uint32 tokens)" : "llm.c .bin v1 (uint16 tokens)";
  file.tokens = view(bytes.subspan(kLlmcHeaderBytes), u32);
  file.mask = open_mask(file.path, file.tokens.size());
  if (!file.mask.bytes.empty()) {
    file.tokens = file.tokens.with_mask(file.mask.bytes);
    file.format += ", with its loss mask";
  }
}

// Refuses a dtype given for a file that begins with an llm.c header: the header would be read as
// 512 (or 256) tokens, and the header already says the width.
void check_no_llmc_header(const TokenFile& file, bool wide) {
  std::span<const std::byte> bytes = file.mapping.bytes();
  if (bytes.size() < kLlmcHeaderBytes) return;
  const auto magic = read_at<std::int32_t>(bytes, 0);
  const auto version = read_at<std::int32_t>(bytes, 4);
  if ((magic != kLlmcMagicU16 || version != 1) && (magic != kLlmcMagicU32 || version != 7)) return;
  refuse(
      file.path,
      fmt::format("starts with llm.c's header (magic {} version {}: {} tokens), but "
                  "\"strata.data.dtype\": \"{}\" reads the file as a bare token array, "
                  "header included",
                  magic, version, version == 7 ? "uint32" : "uint16", wide ? "uint32" : "uint16"),
      "remove \"dtype\" from \"strata\": {\"data\": {...}}: the header gives the width");
}

// Refuses uint32 ids declared uint16, from the first MiB: read as uint16, a little-endian uint32
// id is followed by its high half, below 16 for any vocabulary under 2^20 and 0 under 65,536, and
// a big-endian one preceded by a 0. At least 32 pairs are looked at, so that a file of a few
// hand-written ids is not judged by chance.
void check_not_uint32(const TokenFile& file) {
  constexpr std::size_t kSampleBytes = std::size_t{1} << 20;
  constexpr std::size_t kPairsNeeded = 32;
  std::span<const std::byte> bytes = file.mapping.bytes();
  const std::size_t sample_bytes = std::min(bytes.size(), kSampleBytes);
  if (sample_bytes / 4 < kPairsNeeded) return;
  std::uint16_t even_max = 0;  // positions 0, 2, 4, ... counted from 0
  std::uint16_t odd_max = 0;
  for (std::size_t pair = 0; pair < sample_bytes / 4; ++pair) {
    even_max = std::max(even_max, read_at<std::uint16_t>(bytes, pair * 4));
    odd_max = std::max(odd_max, read_at<std::uint16_t>(bytes, pair * 4 + 2));
  }
  const bool little_endian = (odd_max == 0 && even_max > 0) || (odd_max < 16 && even_max >= 16);
  const bool big_endian = even_max == 0 && odd_max > 0;
  if (!little_endian && !big_endian) return;
  refuse(file.path,
         fmt::format("read as uint16 tokens (\"strata.data.dtype\": \"uint16\"), its first {} "
                     "has {} at every {} position (counted from 0) and ids up to {} at the "
                     "others: the file holds {}-endian uint32 ids, which uint16 reads as each id "
                     "beside its high half, twice the real count",
                     base::format_bytes(static_cast<double>(sample_bytes)),
                     little_endian && odd_max > 0 ? "ids below 16" : "0",
                     little_endian ? "odd" : "even", little_endian ? even_max : odd_max,
                     little_endian ? "little" : "big"),
         little_endian ? "set \"strata\": {\"data\": {\"dtype\": \"uint32\"}}"
                       : "write the ids again as little-endian uint32 (numpy's astype(\"<u4\")) "
                         "and set \"strata\": {\"data\": {\"dtype\": \"uint32\"}}");
}

void open_raw(TokenFile& file, bool wide) {
  check_no_llmc_header(file, wide);
  if (!wide) check_not_uint32(file);
  const std::size_t width = wide ? 4 : 2;
  if (file.mapping.size() % width != 0) {
    refuse(file.path,
           fmt::format("holds {} bytes, not a whole number of {}-byte tokens", file.mapping.size(),
                       width),
           wide ? "check \"strata.data.dtype\": \"uint16\" if the file holds 16-bit tokens"
                : "check \"strata.data.dtype\": \"uint32\" if the file holds 32-bit tokens");
  }
  file.format = wide ? kRawU32Format : "raw uint16 tokens";
  file.tokens = view(file.mapping.bytes(), wide);
}

// A Megatron-LM indexed dataset: `index` is PREFIX.idx, `file.path` PREFIX.bin.
// `dtype`, when given, must agree with the index's: "uint16" with code 8 reads the same stream.
void open_megatron(TokenFile& file, const std::filesystem::path& index_path,
                   const std::string& dtype, const std::string& key) {
  const base::MappedFile index = map(index_path, key);
  std::span<const std::byte> bytes = index.bytes();
  const std::string fix =
      "write the pair again with Megatron-LM's tools/preprocess_data.py, or copy both files "
      "again whole";
  constexpr std::size_t kHeaderBytes = kMegatronMagicBytes + 8 + 1 + 8 + 8;
  if (bytes.size() < kHeaderBytes ||
      std::memcmp(bytes.data(), kMegatronMagic, kMegatronMagicBytes) != 0) {
    refuse(index_path, "not a Megatron-LM index: it does not start with \"MMIDIDX\\0\\0\"", fix);
  }
  const auto version = read_at<std::uint64_t>(bytes, 9);
  const auto code = read_at<std::uint8_t>(bytes, 17);
  const auto sequences = read_at<std::uint64_t>(bytes, 18);
  if (version != 1) refuse(index_path, fmt::format("index version {}, not 1", version), fix);
  // Megatron's DType codes: 8 is uint16, 4 int32 (what preprocess_data.py writes for
  // vocabularies past 65,500).
  if (code != 8 && code != 4) {
    refuse(index_path,
           fmt::format("token type code {}: strata reads uint16 (8) and int32 (4) tokens", code),
           "preprocess the data with a vocabulary-sized integer type (uint16 or int32)");
  }
  const std::size_t width = code == 8 ? 2 : 4;
  if (sequences > (bytes.size() - kHeaderBytes) / 12) {
    refuse(index_path,
           fmt::format("says {} sequences but is too short for their sizes and "
                       "pointers",
                       sequences),
           fix);
  }
  std::uint64_t tokens = 0;
  for (std::uint64_t s = 0; s < sequences; ++s)
    tokens += static_cast<std::uint64_t>(
        read_at<std::int32_t>(bytes, kHeaderBytes + static_cast<std::size_t>(s) * 4));
  if (tokens * width != file.mapping.size()) {
    refuse(file.path,
           fmt::format("holds {} bytes but its index {} lists {} tokens of {} bytes",
                       file.mapping.size(), index_path.string(), tokens, width),
           fix);
  }
  if (!dtype.empty() && (dtype == "uint32") != (width == 4)) {
    refuse(file.path,
           fmt::format("\"strata.data.dtype\": \"{}\" reads {} tokens, but its index {} lists "
                       "{} tokens of {} ({} bytes each), which is the file's size",
                       dtype, file.mapping.size() / (dtype == "uint32" ? 4 : 2),
                       index_path.string(), tokens, code == 8 ? "uint16" : "int32", width),
           "remove \"dtype\" from \"strata\": {\"data\": {...}}: the index gives the width");
  }
  file.format = fmt::format("Megatron-LM indexed dataset ({} sequences, {} tokens)", sequences,
                            code == 8 ? "uint16" : "int32");
  file.tokens = view(file.mapping.bytes(), width == 4);
}

// The built-in GPT's ids of a text file: its bytes, whatever they are (`bytes`, the file mapped);
// for JSON Lines each line's "text" followed by a newline (there is no end-of-document among 256
// byte ids).
std::vector<std::uint16_t> text_bytes(const std::filesystem::path& path,
                                      std::span<const std::byte> bytes) {
  if (path.extension() != ".jsonl" && path.extension() != ".ndjson") {
    return encode_bytes({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
  }
  const TextDocuments documents = TextDocuments::open(path);
  std::vector<std::uint16_t> ids;
  std::string scratch;
  for (std::size_t i = 0; i < documents.size(); ++i) {
    const std::vector<std::uint16_t> document = encode_bytes(documents.document(i, scratch));
    ids.insert(ids.end(), document.begin(), document.end());
    ids.push_back('\n');
  }
  return ids;
}

// Text under the model's tokenizer: the token cache beside the file, opened as the llm.c file it
// is.
void open_tokenized(TokenFile& file, const tokenizer::Tokenizer& tokenizer,
                    const TextTokenizing& tokenizing, const std::string& key) {
  const std::filesystem::path text = file.path;
  file.mapping = base::MappedFile();
  const ChatEncoder* chat = tokenizing.chat ? tokenizing.chat() : nullptr;
  const std::filesystem::path cache = cached_tokens(text, tokenizer, chat, tokenizing.progress);
  file.path = cache;
  file.mapping = map(cache, key);
  open_llmc(file, key);
  file.format = fmt::format("{} tokenized by {}", text.string(), tokenizer.source());
}

}  // namespace

TokenView TokenView::with_mask(std::span<const std::uint8_t> mask) const {
  STRATA_ASSERT(mask.size() == size_);
  TokenView masked = *this;
  masked.mask_ = mask.data();
  return masked;
}

std::uint8_t TokenView::mask_at(std::size_t i) const {
  STRATA_ASSERT(i < size_);
  return mask_ != nullptr ? mask_[i] : kInLoss;
}

TokenView TokenView::subview(std::size_t begin, std::size_t count) const {
  STRATA_ASSERT(begin + count <= size_);
  TokenView part = *this;
  part.data_ = static_cast<const std::byte*>(data_) + begin * (wide_ ? 4 : 2);
  if (mask_ != nullptr) part.mask_ = mask_ + begin;
  part.size_ = count;
  return part;
}

void TokenView::copy_targets(std::size_t begin, std::span<std::int32_t> out) const {
  copy(begin, out);
  if (mask_ == nullptr) return;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if ((mask_[begin + i] & kInLoss) == 0) out[i] = kIgnoredTarget;
  }
}

void TokenView::copy(std::size_t begin, std::span<std::int32_t> out) const {
  STRATA_ASSERT(begin + out.size() <= size_);
  if (wide_) {
    const auto* from = static_cast<const std::uint32_t*>(data_) + begin;
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<std::int32_t>(from[i]);
  } else {
    const auto* from = static_cast<const std::uint16_t*>(data_) + begin;
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = from[i];
  }
}

std::size_t TokenView::find_at_or_past(std::uint32_t limit) const {
  if (wide_) {
    const auto* from = static_cast<const std::uint32_t*>(data_);
    return static_cast<std::size_t>(
        std::find_if(from, from + size_, [&](std::uint32_t t) { return t >= limit; }) - from);
  }
  const auto* from = static_cast<const std::uint16_t*>(data_);
  return static_cast<std::size_t>(
      std::find_if(from, from + size_, [&](std::uint16_t t) { return t >= limit; }) - from);
}

void check_token_ids(const TokenFile& file, int vocab, const std::string& source) {
  STRATA_ASSERT(vocab > 0);
  const std::size_t at = file.tokens.find_at_or_past(static_cast<std::uint32_t>(vocab));
  if (at == file.tokens.size()) return;
  // Two 16-bit ids read as one 32-bit id make it at least 65,536 whenever the second is not 0.
  const bool maybe_narrow = file.format == kRawU32Format && file.tokens[at] > 0xFFFF;
  throw UserError(
      fmt::format("{} holds token id {} at token {} (counted from 0 after any header), but the "
                  "model's vocabulary has {} tokens",
                  file.path.empty() ? source : file.path.string(), file.tokens[at], at, vocab),
      fmt::format("{}tokenize the data with the model's own tokenizer; for a model built from its "
                  "shape keys, set \"strata\": {{\"model\": {{\"vocab\": {}}}}} or more",
                  maybe_narrow ? "if the file holds 16-bit ids (as nanoGPT's train.bin does), set "
                                 "\"strata\": {\"data\": {\"dtype\": \"uint16\"}}; else "
                               : "",
                  file.tokens[at] + 1),
      2);
}

bool is_text(const TokenFile& file) {
  return file.format == kTextFormat;
}

void check_tokenizer(const TokenFile& file, std::int64_t vocab,
                     const std::filesystem::path& hf_config) {
  if (!is_text(file) || hf_config.empty()) return;
  const std::filesystem::path folder = hf_config.parent_path();
  throw UserError(
      fmt::format("{} is text, and the model {} describes takes the ids of its own tokenizer ({} "
                  "tokens), but {} holds no tokenizer.json to make them with: read as bytes, it "
                  "would train on byte values as if they were those ids",
                  file.path.string(), hf_config.string(), vocab,
                  folder.empty() ? std::string("its folder") : folder.string()),
      fmt::format(
          "put the model's tokenizer.json (with its tokenizer_config.json) beside {}, "
          "or make a token file with `strata tokenize --tokenizer TOKENIZER_DIR --output "
          "{} {}` and set \"strata\": {{\"data\": {{\"path\": \"{}\"}}}} "
          "(docs/data.md)",
          hf_config.string(), std::filesystem::path(file.path).replace_extension(".bin").string(),
          file.path.string(), std::filesystem::path(file.path).replace_extension(".bin").string()),
      2);
}

TokenFile open_token_file(const std::filesystem::path& path, const std::string& dtype,
                          const std::string& key, const TextTokenizing& text) {
  STRATA_ASSERT(dtype.empty() || dtype == "uint16" || dtype == "uint32");
  // A Megatron prefix may be given bare (as Megatron's --data-path takes it) or with .bin.
  std::filesystem::path bin = path;
  std::filesystem::path index = path;
  index += ".idx";
  if (path.extension() == ".bin") index = std::filesystem::path(path).replace_extension(".idx");
  std::error_code error;
  const bool megatron = std::filesystem::is_regular_file(index, error);
  if (megatron && path.extension() != ".bin") bin += ".bin";

  TokenFile file;
  file.path = bin;
  file.mapping = map(bin, key);
  if (file.mapping.size() == 0) {
    throw UserError(fmt::format("{} {} is empty", key, bin.string()), data_fix(key), 2);
  }
  if (megatron) {
    open_megatron(file, index, dtype, key);
  } else if (!dtype.empty()) {
    open_raw(file, dtype == "uint32");
  } else if (bin.extension() == ".bin") {
    open_llmc(file, key);
  } else if (const tokenizer::Tokenizer* model = text.tokenizer ? text.tokenizer() : nullptr) {
    open_tokenized(file, *model, text, key);
  } else {
    file.owned = text_bytes(bin, file.mapping.bytes());
    file.mapping = base::MappedFile();
    file.format = kTextFormat;
    file.tokens = std::span<const std::uint16_t>(file.owned);
  }
  return file;
}

}  // namespace strata::models
