// `strata tokenize`: a model folder's Hugging Face tokenizer on the command line. Text on
// standard input to ids, ids to text (--decode), or text files to an llm.c token file (--output)
// that strata.data.path takes.

#include <fmt/format.h>
#include <unistd.h>

#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "models/data/chat_encoder.h"
#include "models/data/loss_mask.h"
#include "models/data/text_documents.h"
#include "models/data/text_tokens.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/utf8.h"
#include "tools/commands.h"
#include "tools/tokenize_progress.h"

namespace strata::tools {
namespace {

struct TokenizeOptions {
  std::string tokenizer_path;
  bool json = false;
  bool no_special_tokens = false;
  bool decode = false;
  bool chat = false;
  bool add_generation_prompt = false;
  std::string output;
  std::vector<std::string> inputs;
  int threads = 0;
};

std::string read_stdin() {
  return {std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
}

void encode_stdin(const models::tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options) {
  const std::string text = read_stdin();
  if (const std::size_t bad = models::tokenizer::invalid_utf8_offset(text);
      bad != std::string_view::npos) {
    throw UserError(fmt::format("standard input is not valid UTF-8 at byte {}", bad),
                    "convert the text to UTF-8 (iconv -f <its encoding> -t UTF-8)", 2);
  }
  const std::vector<std::int32_t> ids = tokenizer.encode(text, !options.no_special_tokens);
  if (options.json) {
    std::cout << nlohmann::json{{"ids", ids}}.dump() << '\n';
    return;
  }
  std::string line;
  for (const std::int32_t id : ids)
    line += fmt::format("{}{}", line.empty() ? "" : " ", id);
  std::cout << line << '\n';
}

void decode_stdin(const models::tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options) {
  const std::string input = read_stdin();
  std::vector<std::int32_t> ids;
  try {
    ids = nlohmann::json::parse(input).get<std::vector<std::int32_t>>();
  } catch (const nlohmann::json::exception& error) {
    throw UserError(
        fmt::format("--decode reads a JSON array of token ids on standard input: {}", error.what()),
        "give the ids as [15496, 995], as `strata tokenize --json` prints them", 2);
  }
  const std::string text = tokenizer.decode(ids, /*skip_special_tokens=*/false);
  if (options.json) {
    std::cout << nlohmann::json{{"text", text}}.dump() << '\n';
  } else {
    std::cout << text;
  }
}

models::ChatEncoder chat_encoder(const models::tokenizer::Tokenizer& tokenizer) {
  std::optional<models::ChatEncoder> chat = models::ChatEncoder::for_tokenizer(tokenizer);
  if (chat) return std::move(*chat);
  throw UserError(fmt::format("the folder of {} has no chat template: no chat_template.jinja and "
                              "no \"chat_template\" in its tokenizer_config.json",
                              tokenizer.source()),
                  "give the folder of a chat model (an instruct model's tokenizer_config.json "
                  "carries its template)",
                  2);
}

// {"messages": [...], "tools": [...]} on standard input to {"text", "ids", "mask"}.
void chat_stdin(const models::tokenizer::Tokenizer& tokenizer, const TokenizeOptions& options) {
  nlohmann::ordered_json input;
  try {
    input = nlohmann::ordered_json::parse(read_stdin());
  } catch (const nlohmann::json::exception& error) {
    throw UserError(fmt::format("--chat reads a JSON object on standard input: {}", error.what()),
                    "give {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}], "
                    "\"tools\": [...]}",
                    2);
  }
  if (!input.is_object() || !input.contains("messages") || !input["messages"].is_array()) {
    throw UserError("--chat reads an object with a \"messages\" list on standard input",
                    "give {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}], "
                    "\"tools\": [...]}",
                    2);
  }
  const models::ChatEncoder chat = chat_encoder(tokenizer);
  const nlohmann::ordered_json tools = input.value("tools", nlohmann::ordered_json());
  const models::ChatEncoding encoding =
      chat.encode(input["messages"], tools, options.add_generation_prompt);
  if (!options.json) {
    std::cout << encoding.text;
    return;
  }
  const nlohmann::ordered_json out{
      {"text", encoding.text}, {"ids", encoding.ids}, {"mask", encoding.in_loss}};
  std::cout << out.dump() << '\n';
}

void write_token_file(const models::tokenizer::Tokenizer& tokenizer,
                      const TokenizeOptions& options) {
  if (options.inputs.empty()) {
    throw UserError("--output needs the text files to tokenize after it",
                    "strata tokenize --tokenizer MODEL_DIR --output train.bin train.jsonl", 2);
  }
  const std::vector<std::filesystem::path> inputs(options.inputs.begin(), options.inputs.end());
  for (const auto& input : inputs) {
    if (!models::TextDocuments::takes(input)) {
      throw UserError(fmt::format("{} is not a .txt, .jsonl or .ndjson file", input.string()),
                      "give text as .txt files (one document each) or JSON Lines with a "
                      "\"text\" field per line",
                      2);
    }
  }
  const std::optional<models::ChatEncoder> chat = models::ChatEncoder::for_tokenizer(tokenizer);
  ProgressLine progress("tokenizing");
  models::TokenizeOptions tokenize;
  tokenize.add_special_tokens = !options.no_special_tokens;
  tokenize.threads = options.threads;
  tokenize.progress = [&](std::size_t done, std::size_t total) { progress.show(done, total); };
  tokenize.chat = chat ? &*chat : nullptr;
  const models::TokenFileWritten written = models::tokenize_to_file(
      inputs, tokenizer, tokenize, options.output, models::MaskFileWhen::some_left_out);
  progress.finish();
  std::cerr << fmt::format(
      "strata tokenize: {} tokens of {} file(s) written to {} (llm.c {}){}\n", written.ids,
      inputs.size(), options.output, tokenizer.vocab_size() > 65536 ? "v7, uint32" : "v1, uint16",
      written.mask
          ? fmt::format(", the loss mask to {}", models::mask_path(options.output).string())
          : "");
}

}  // namespace

void add_tokenize_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* command =
      app.add_subcommand("tokenize",
                         "Encode text with a model's Hugging Face tokenizer, decode ids, or write "
                         "token files for strata.data.path");
  command
      ->add_option("--tokenizer", options->tokenizer_path,
                   "a model folder holding tokenizer.json, or a tokenizer.json")
      ->required();
  command->add_flag("--json", options->json,
                    "print {\"ids\": [...]} (or, with --decode, {\"text\": \"...\"})");
  command->add_flag("--no-special-tokens", options->no_special_tokens,
                    "leave out the tokens the post-processor adds (a BOS, say)");
  command->add_flag("--decode", options->decode,
                    "read a JSON array of ids on standard input and print their text, special "
                    "tokens kept");
  command->add_flag("--chat", options->chat,
                    "read {\"messages\": [...], \"tools\": [...]} on standard input and render "
                    "the folder's chat template; with --json print {\"text\", \"ids\", "
                    "\"mask\"}, the mask 1 on the assistant turns the loss counts");
  command->add_flag("--add-generation-prompt", options->add_generation_prompt,
                    "with --chat: end with the prompt of the assistant's next turn");
  command->add_option("--output", options->output,
                      "write the ids of INPUT files (.txt, .jsonl) to this llm.c .bin, each "
                      "document followed by EOS, and their loss mask to OUT.bin.mask when some "
                      "token is out of the loss (prompt and completion, messages)");
  command->add_option("--threads", options->threads, "threads for --output (0: every core)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("inputs", options->inputs, "with --output: the text files to tokenize");
  command->callback([options, &context] {
    if (options->add_generation_prompt && !options->chat) {
      throw UserError("--add-generation-prompt renders a chat template, which only --chat does",
                      "add --chat, and give {\"messages\": [...]} on standard input", 2);
    }
    const auto tokenizer = models::tokenizer::Tokenizer::load(options->tokenizer_path);
    if (!options->output.empty()) {
      write_token_file(tokenizer, *options);
    } else if (!options->inputs.empty()) {
      throw UserError("input files are tokenized only into a token file",
                      "add --output OUT.bin, or give the text on standard input", 2);
    } else if (options->chat) {
      chat_stdin(tokenizer, *options);
    } else if (options->decode) {
      decode_stdin(tokenizer, *options);
    } else {
      encode_stdin(tokenizer, *options);
    }
    context.exit_status = 0;
  });
}

}  // namespace strata::tools
