#include "models/data/text_tokens.h"

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "base/error.h"
#include "models/data/llmc_writer.h"
#include "models/data/text_documents.h"

namespace strata::models {
namespace {

// Documents handed to the threads at a time: enough to keep every core busy, few enough that
// progress moves and memory holds only one batch's ids.
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

std::int32_t eos_of(const tokenizer::Tokenizer& tokenizer) {
  const std::optional<std::int32_t> eos = tokenizer.eos_id();
  if (eos) return *eos;
  throw UserError(fmt::format("the tokenizer {} names no end-of-sequence token, which goes "
                              "between documents",
                              tokenizer.source()),
                  "set \"eos_token\" in the tokenizer_config.json beside it", 2);
}

}  // namespace

std::size_t tokenize_files(std::span<const std::filesystem::path> paths,
                           const tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options,
                           const OnTokens& on_tokens) {
  const std::int32_t eos = eos_of(tokenizer);
  std::vector<TextDocuments> files;
  std::size_t bytes_total = 0;
  for (const std::filesystem::path& path : paths) {
    files.push_back(TextDocuments::open(path));
    bytes_total += files.back().file_bytes();
  }
  tbb::task_arena arena(options.threads > 0 ? options.threads : tbb::task_arena::automatic);
  std::vector<std::vector<std::int32_t>> encoded;
  std::vector<std::uint32_t> batch_ids;
  std::size_t bytes_done = 0;
  std::size_t made = 0;
  for (const TextDocuments& documents : files) {
    for (std::size_t first = 0; first < documents.size(); first += kBatchDocuments) {
      const std::size_t count = std::min(kBatchDocuments, documents.size() - first);
      arena.execute([&] {
        encode_batch(documents, first, count, tokenizer, options.add_special_tokens, encoded);
      });
      batch_ids.clear();
      for (std::size_t i = 0; i < count; ++i) {
        append_document(batch_ids, encoded[i], eos);
        bytes_done += documents.document_bytes(first + i);
      }
      on_tokens(batch_ids);
      made += batch_ids.size();
      if (options.progress) options.progress(bytes_done, bytes_total);
    }
  }
  if (options.progress) options.progress(bytes_total, bytes_total);
  return made;
}

std::vector<std::uint32_t> tokenize_files(std::span<const std::filesystem::path> paths,
                                          const tokenizer::Tokenizer& tokenizer,
                                          const TokenizeOptions& options) {
  std::vector<std::uint32_t> ids;
  tokenize_files(paths, tokenizer, options, [&](std::span<const std::uint32_t> batch) {
    ids.insert(ids.end(), batch.begin(), batch.end());
  });
  return ids;
}

std::size_t tokenize_to_file(std::span<const std::filesystem::path> paths,
                             const tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options,
                             const std::filesystem::path& out,
                             std::span<const std::int32_t> header_extra) {
  eos_of(tokenizer);  // refused before the file is made
  LlmcWriter writer(out, tokenizer.vocab_size(), header_extra);
  tokenize_files(paths, tokenizer, options,
                 [&](std::span<const std::uint32_t> ids) { writer.append(ids); });
  writer.finish();
  return writer.count();
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

}  // namespace strata::models
