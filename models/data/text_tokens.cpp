#include "models/data/text_tokens.h"

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <array>
#include <climits>
#include <cstdio>
#include <memory>
#include <system_error>

#include <unistd.h>

#include "base/assert.h"
#include "base/error.h"
#include "models/data/text_documents.h"

namespace strata::models {
namespace {

constexpr std::int32_t kLlmcMagicU16 = 20240520;
constexpr std::int32_t kLlmcMagicU32 = 20240801;
constexpr std::size_t kLlmcHeaderWords = 256;
// Documents handed to the threads at a time: enough to keep every core busy, few enough that
// progress moves and memory holds only one batch's ids beyond the result.
constexpr std::size_t kBatchDocuments = 1024;

// Encodes documents [first, first + count) of `documents` into `encoded`, one vector each.
void encode_batch(const TextDocuments& documents, std::size_t first, std::size_t count,
                  const tokenizer::Tokenizer& tokenizer, bool add_special_tokens,
                  std::vector<std::vector<std::int32_t>>& encoded) {
  encoded.assign(count, {});
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, 1),
                    [&](const tbb::blocked_range<std::size_t>& range) {
                      std::string scratch;
                      for (std::size_t i = range.begin(); i != range.end(); ++i) {
                        const std::string_view text = documents.document(first + i, scratch);
                        tokenizer.encode_into(text, add_special_tokens, encoded[i]);
                      }
                    });
}

void append_document(std::vector<std::uint32_t>& ids, const std::vector<std::int32_t>& document,
                     std::int32_t eos) {
  ids.insert(ids.end(), document.begin(), document.end());
  if (document.empty() || document.back() != eos) ids.push_back(static_cast<std::uint32_t>(eos));
}

}  // namespace

std::vector<std::uint32_t> tokenize_files(std::span<const std::filesystem::path> paths,
                                          const tokenizer::Tokenizer& tokenizer,
                                          const TokenizeOptions& options) {
  const std::optional<std::int32_t> eos = tokenizer.eos_id();
  if (!eos) {
    throw UserError(fmt::format("the tokenizer {} names no end-of-sequence token, which goes "
                                "between documents",
                                tokenizer.source()),
                    "set \"eos_token\" in the tokenizer_config.json beside it", 2);
  }
  std::vector<TextDocuments> files;
  std::size_t bytes_total = 0;
  for (const std::filesystem::path& path : paths) {
    files.push_back(TextDocuments::open(path));
    bytes_total += files.back().file_bytes();
  }
  tbb::task_arena arena(options.threads > 0 ? options.threads : tbb::task_arena::automatic);
  std::vector<std::uint32_t> ids;
  std::vector<std::vector<std::int32_t>> encoded;
  std::size_t bytes_done = 0;
  for (const TextDocuments& documents : files) {
    for (std::size_t first = 0; first < documents.size(); first += kBatchDocuments) {
      const std::size_t count = std::min(kBatchDocuments, documents.size() - first);
      arena.execute([&] {
        encode_batch(documents, first, count, tokenizer, options.add_special_tokens, encoded);
      });
      for (std::size_t i = 0; i < count; ++i) {
        append_document(ids, encoded[i], *eos);
        bytes_done += documents.document_bytes(first + i);
      }
      if (options.progress) options.progress(bytes_done, bytes_total);
    }
  }
  if (options.progress) options.progress(bytes_total, bytes_total);
  return ids;
}

std::optional<tokenizer::Tokenizer> model_tokenizer(const std::filesystem::path& hf_config,
                                                    std::int64_t model_vocab) {
  if (hf_config.empty()) return std::nullopt;
  const std::filesystem::path file = hf_config.parent_path() / "tokenizer.json";
  std::error_code error;
  if (!std::filesystem::is_regular_file(file, error)) return std::nullopt;
  tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::load(file);
  if (tokenizer.vocab_size() > model_vocab) {
    throw UserError(
        fmt::format("the tokenizer {} makes ids up to {}, past the {} rows of the "
                    "model {} describes (vocab_size)",
                    file.string(), tokenizer.vocab_size() - 1, model_vocab, hf_config.string()),
        "put the tokenizer of this model beside its config.json: a tokenizer of "
        "another model makes ids this one has no embedding for",
        2);
  }
  return tokenizer;
}

void write_llmc_tokens(const std::filesystem::path& out, std::span<const std::uint32_t> ids,
                       std::int64_t vocab, std::span<const std::int32_t> header_extra) {
  STRATA_ASSERT(header_extra.size() <= kLlmcFreeHeaderWords);
  if (ids.size() > static_cast<std::size_t>(INT32_MAX)) {
    throw UserError(fmt::format("{} would hold {} tokens, more than an llm.c header counts "
                                "(2^31 - 1)",
                                out.string(), ids.size()),
                    "split the input into several files and tokenize each on its own", 2);
  }
  const bool wide = vocab > 65536;
  std::array<std::int32_t, kLlmcHeaderWords> header{};
  header[0] = wide ? kLlmcMagicU32 : kLlmcMagicU16;
  header[1] = wide ? 7 : 1;
  header[2] = static_cast<std::int32_t>(ids.size());
  std::copy(header_extra.begin(), header_extra.end(), header.begin() + 3);

  // A name of this process's own: ranks that tokenize the same file at once each write their
  // own, and the last rename leaves one whole file.
  std::filesystem::path partial = out;
  partial += fmt::format(".partial.{}", getpid());
  const auto cannot_write = [&] {
    return UserError(fmt::format("cannot write {}: {}", partial.string(),
                                 std::error_code(errno, std::system_category()).message()),
                     "write the token file to a folder you can write to, with free space", 1);
  };
  {
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(partial.c_str(), "wb"),
                                                               &std::fclose);
    if (!file) throw cannot_write();
    bool ok = std::fwrite(header.data(), sizeof(std::int32_t), header.size(), file.get()) ==
              header.size();
    if (wide) {
      ok = ok &&
           std::fwrite(ids.data(), sizeof(std::uint32_t), ids.size(), file.get()) == ids.size();
    } else {
      const std::vector<std::uint16_t> narrow(ids.begin(), ids.end());
      ok = ok && std::fwrite(narrow.data(), sizeof(std::uint16_t), narrow.size(), file.get()) ==
                     narrow.size();
    }
    ok = ok && std::fflush(file.get()) == 0;
    if (!ok) throw cannot_write();
  }
  std::error_code error;
  std::filesystem::rename(partial, out, error);
  if (error) {
    throw UserError(
        fmt::format("cannot rename {} to {}: {}", partial.string(), out.string(), error.message()),
        "write the token file to a folder you can write to", 1);
  }
}

}  // namespace strata::models
