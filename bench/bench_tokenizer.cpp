// `strata bench tokenizer`: encoding throughput of a model's Hugging Face tokenizer on a text
// file, on a given number of threads. Its peer, OpenAI's tiktoken on the same documents, runs
// beside it in scripts/bench_tokenizer.sh (docs/benchmarks.md).

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "bench/bench.h"
#include "models/data/text_documents.h"
#include "models/tokenizer/tokenizer.h"

namespace strata::tools {
namespace {

struct BenchTokenizerOptions {
  std::string tokenizer_path;
  std::string input;
  int threads = 1;
  int repeats = 3;
};

// The documents' texts, read (and a JSON line's text unescaped) before any timing.
std::vector<std::string> load_documents(const std::filesystem::path& path) {
  const models::TextDocuments documents = models::TextDocuments::open(path);
  std::vector<std::string> texts(documents.size());
  std::string scratch;
  for (std::size_t i = 0; i < documents.size(); ++i) {
    texts[i] = std::string(documents.document(i, scratch));
  }
  return texts;
}

// One pass: every document encoded without special tokens (as tiktoken's encode_ordinary), on
// the arena's threads. Returns the tokens made.
std::size_t encode_all(const models::tokenizer::Tokenizer& tokenizer,
                       const std::vector<std::string>& texts, tbb::task_arena& arena) {
  std::atomic<std::size_t> tokens{0};
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, texts.size(), 1),
                      [&](const tbb::blocked_range<std::size_t>& range) {
                        std::vector<std::int32_t> ids;
                        std::size_t made = 0;
                        for (std::size_t i = range.begin(); i != range.end(); ++i) {
                          ids.clear();
                          tokenizer.encode_into(texts[i], false, ids);
                          made += ids.size();
                        }
                        tokens += made;
                      });
  });
  return tokens.load();
}

void run_bench_tokenizer(const BenchTokenizerOptions& options) {
  const auto tokenizer = models::tokenizer::Tokenizer::load(options.tokenizer_path);
  const std::vector<std::string> texts = load_documents(options.input);
  std::size_t bytes = 0;
  for (const std::string& text : texts)
    bytes += text.size();
  tbb::task_arena arena(options.threads);
  double best_seconds = 0;
  std::size_t tokens = 0;
  // The first pass starts with empty word caches (cold); the timed ones find the words the text
  // repeats already there, as a long tokenization run does.
  const auto cold_start = std::chrono::steady_clock::now();
  encode_all(tokenizer, texts, arena);
  const double cold_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - cold_start).count();
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    tokens = encode_all(tokenizer, texts, arena);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (repeat == 0 || seconds < best_seconds) best_seconds = seconds;
  }
  const nlohmann::json result = {{"tokenizer", tokenizer.source()},
                                 {"input", options.input},
                                 {"documents", texts.size()},
                                 {"threads", options.threads},
                                 {"bytes", bytes},
                                 {"tokens", tokens},
                                 {"seconds", best_seconds},
                                 {"mb_per_s", static_cast<double>(bytes) / 1e6 / best_seconds},
                                 {"cold_seconds", cold_seconds},
                                 {"cold_mb_per_s", static_cast<double>(bytes) / 1e6 / cold_seconds},
                                 {"tokens_per_s", static_cast<double>(tokens) / best_seconds}};
  std::cout << result.dump() << '\n';
}

}  // namespace

void add_bench_tokenizer_command(CLI::App& bench, CommandContext& context) {
  auto options = std::make_shared<BenchTokenizerOptions>();
  CLI::App* command = bench.add_subcommand(
      "tokenizer",
      "Encoding throughput of a Hugging Face tokenizer on a .txt or .jsonl file "
      "(the first, cold pass and the best of --repeats warm ones; one JSON line)");
  command
      ->add_option("--tokenizer", options->tokenizer_path,
                   "a model folder holding tokenizer.json, or a tokenizer.json")
      ->required();
  command
      ->add_option("--input", options->input,
                   "the text: a .txt file (one document) or .jsonl (a document per line)")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--threads", options->threads, "threads encoding documents at once")
      ->check(CLI::PositiveNumber);
  command->add_option("--repeats", options->repeats, "timed passes; the best is reported")
      ->check(CLI::PositiveNumber);
  command->callback([options, &context] {
    run_bench_tokenizer(*options);
    context.exit_status = 0;
  });
}

}  // namespace strata::tools
