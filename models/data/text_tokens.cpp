#include "models/data/text_tokens.h"

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "base/error.h"
#include "models/data/example_encoder.h"
#include "models/data/llmc_writer.h"
#include "models/data/loss_mask.h"
#include "models/data/text_documents.h"

namespace strata::models {
namespace {

// Documents handed to the threads at a time: enough to keep every core busy, few enough that
// progress moves and memory holds only one batch's ids.
constexpr std::size_t kBatchDocuments = 1024;

// Encodes documents [first, first + count) of `documents` into `encoded`, one example each.
void encode_batch(const TextDocuments& documents, std::size_t first, std::size_t count,
                  const ExampleEncoder& encoder, std::vector<EncodedExample>& encoded) {
  encoded.resize(count);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, 1),
                    [&](const tbb::blocked_range<std::size_t>& range) {
                      for (std::size_t i = range.begin(); i != range.end(); ++i)
                        encoder.encode(documents, first + i, encoded[i]);
                    });
}

void append_example(TokenizedText& batch, const EncodedExample& example) {
  batch.ids.insert(batch.ids.end(), example.ids.begin(), example.ids.end());
  batch.mask.insert(batch.mask.end(), example.mask.begin(), example.mask.end());
}

}  // namespace

std::size_t tokenize_files(std::span<const std::filesystem::path> paths,
                           const tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options,
                           const OnTokens& on_tokens) {
  const ExampleEncoder encoder(tokenizer, options.chat, options.add_special_tokens);
  std::vector<TextDocuments> files;
  std::size_t bytes_total = 0;
  for (const std::filesystem::path& path : paths) {
    files.push_back(TextDocuments::open(path));
    bytes_total += files.back().file_bytes();
  }
  tbb::task_arena arena(options.threads > 0 ? options.threads : tbb::task_arena::automatic);
  std::vector<EncodedExample> encoded;
  TokenizedText batch;
  std::size_t bytes_done = 0;
  std::size_t made = 0;
  for (const TextDocuments& documents : files) {
    for (std::size_t first = 0; first < documents.size(); first += kBatchDocuments) {
      const std::size_t count = std::min(kBatchDocuments, documents.size() - first);
      arena.execute([&] { encode_batch(documents, first, count, encoder, encoded); });
      batch.ids.clear();
      batch.mask.clear();
      for (std::size_t i = 0; i < count; ++i) {
        append_example(batch, encoded[i]);
        bytes_done += documents.document_bytes(first + i);
      }
      on_tokens(batch.ids, batch.mask);
      made += batch.ids.size();
      if (options.progress) options.progress(bytes_done, bytes_total);
    }
  }
  if (options.progress) options.progress(bytes_total, bytes_total);
  return made;
}

TokenizedText tokenize_files(std::span<const std::filesystem::path> paths,
                             const tokenizer::Tokenizer& tokenizer,
                             const TokenizeOptions& options) {
  TokenizedText all;
  tokenize_files(paths, tokenizer, options,
                 [&](std::span<const std::uint32_t> ids, std::span<const std::uint8_t> mask) {
                   all.ids.insert(all.ids.end(), ids.begin(), ids.end());
                   all.mask.insert(all.mask.end(), mask.begin(), mask.end());
                 });
  return all;
}

TokenFileWritten tokenize_to_file(std::span<const std::filesystem::path> paths,
                                  const tokenizer::Tokenizer& tokenizer,
                                  const TokenizeOptions& options, const std::filesystem::path& out,
                                  MaskFileWhen mask_when,
                                  std::span<const std::int32_t> header_extra) {
  // Refused before the file is made: a tokenizer without EOS, a file that cannot be opened.
  const ExampleEncoder check(tokenizer, options.chat, options.add_special_tokens);
  LlmcWriter writer(out, tokenizer.vocab_size(), header_extra, /*with_mask=*/true);
  bool left_out = false;
  tokenize_files(paths, tokenizer, options,
                 [&](std::span<const std::uint32_t> ids, std::span<const std::uint8_t> mask) {
                   left_out = left_out || leaves_tokens_out(mask);
                   writer.append(ids, mask);
                 });
  const bool keep_mask = left_out || mask_when == MaskFileWhen::always;
  if (!keep_mask) writer.drop_mask();
  writer.finish();
  return {writer.count(), keep_mask};
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
