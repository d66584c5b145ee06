#include "tools/generate_prompts.h"

#include <fmt/format.h>

#include <charconv>
#include <fstream>

#include "base/error.h"
#include "models/data/byte_tokenizer.h"

namespace strata::tools {
namespace {

using nlohmann::ordered_json;

std::int32_t parse_id(std::string_view item, const std::string& origin) {
  std::int32_t id = -1;
  const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), id);
  if (item.empty() || error != std::errc{} || end != item.data() + item.size() || id < 0) {
    throw UserError(fmt::format("{}: \"{}\" is not a token id", origin, item),
                    "give token ids as numbers of 0 or more separated by commas (1,2,3)", 2);
  }
  return id;
}

// A prompt from one object: "prompt", "prompt_ids" or "messages" (with "tools").
PromptInput prompt_from_object(const ordered_json& line, const std::string& origin) {
  const char* fix =
      "give each line one of \"prompt\" (text), \"prompt_ids\" (a list of ids) or "
      "\"messages\" (a conversation)";
  if (!line.is_object()) throw UserError(origin + " is not a JSON object", fix, 2);
  PromptInput prompt;
  prompt.origin = origin;
  const int given = static_cast<int>(line.contains("prompt")) +
                    static_cast<int>(line.contains("prompt_ids")) +
                    static_cast<int>(line.contains("messages"));
  if (given != 1) throw UserError(origin + " has not exactly one prompt", fix, 2);
  if (line.contains("prompt")) {
    if (!line["prompt"].is_string()) throw UserError(origin + ": \"prompt\" is not text", fix, 2);
    prompt.text = line["prompt"].get<std::string>();
  } else if (line.contains("prompt_ids")) {
    const ordered_json& ids = line["prompt_ids"];
    if (!ids.is_array()) throw UserError(origin + ": \"prompt_ids\" is not a list", fix, 2);
    prompt.ids.emplace();
    for (const ordered_json& id : ids)
      prompt.ids->push_back(parse_id(id.is_number_integer() ? id.dump() : "", origin));
  } else {
    if (!line["messages"].is_array())
      throw UserError(origin + ": \"messages\" is not a list of messages", fix, 2);
    prompt.messages = line["messages"];
    prompt.tools = line.value("tools", ordered_json());
  }
  return prompt;
}

ordered_json parse_json(const std::string& text, const std::string& origin) {
  try {
    return ordered_json::parse(text);
  } catch (const ordered_json::exception& error) {
    throw UserError(fmt::format("{} is not JSON ({})", origin, error.what()),
                    "write it as JSON (one object per line in a .jsonl file)", 2);
  }
}

std::ifstream open_input(const std::filesystem::path& path, const char* option) {
  std::ifstream in(path);
  if (!in) {
    throw UserError(fmt::format("{} {} cannot be read", option, path.string()),
                    "give a file that exists and can be read", 2);
  }
  return in;
}

std::vector<std::int32_t> prompt_text_ids(const std::string& text, const PromptEncoding& how,
                                          const std::string& origin) {
  if (how.tokenizer != nullptr) return how.tokenizer->encode(text);
  if (how.bytes) {
    const std::vector<std::uint16_t> bytes = models::encode_bytes(text);
    return {bytes.begin(), bytes.end()};
  }
  throw UserError(
      fmt::format("{} is text, and {} has no tokenizer.json beside it to make ids of it", origin,
                  how.model),
      "give the prompt's ids with --prompt-ids, or put the model's tokenizer.json in "
      "its folder",
      2);
}

std::vector<std::int32_t> conversation_ids(const PromptInput& prompt, const PromptEncoding& how) {
  if (how.chat == nullptr) {
    throw UserError(
        fmt::format("{} is a conversation, and {} has no chat template to render it with",
                    prompt.origin, how.model),
        "give the text to continue with --prompt, or use a model folder whose "
        "tokenizer_config.json (or chat_template.jinja) holds its chat template",
        2);
  }
  return how.chat->encode(*prompt.messages, prompt.tools, /*add_generation_prompt=*/true).ids;
}

}  // namespace

PromptInput prompt_from_ids(std::string_view list) {
  PromptInput prompt;
  prompt.origin = "--prompt-ids";
  prompt.ids.emplace();
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    prompt.ids->push_back(parse_id(list.substr(0, comma), prompt.origin));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  return prompt;
}

PromptInput prompt_from_chat_file(const std::filesystem::path& path) {
  std::ifstream in = open_input(path, "--chat");
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  const std::string origin = fmt::format("--chat {}", path.string());
  ordered_json chat = parse_json(text, origin);
  if (chat.is_array()) chat = ordered_json{{"messages", std::move(chat)}};
  if (!chat.is_object() || !chat.contains("messages")) {
    throw UserError(origin + " holds no conversation",
                    "give a list of messages ([{\"role\": \"user\", \"content\": ...}]) or an "
                    "object with \"messages\"",
                    2);
  }
  return prompt_from_object(
      ordered_json{{"messages", chat["messages"]}, {"tools", chat.value("tools", ordered_json())}},
      origin);
}

std::vector<PromptInput> prompts_from_file(const std::filesystem::path& path) {
  std::ifstream in = open_input(path, "--prompts");
  std::vector<PromptInput> prompts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string origin = fmt::format("{} line {}", path.string(), number);
    prompts.push_back(prompt_from_object(parse_json(line, origin), origin));
  }
  if (prompts.empty()) {
    throw UserError(fmt::format("--prompts {} holds no prompt", path.string()),
                    "write one JSON object per line, such as {\"prompt\": \"Once upon a time\"}",
                    2);
  }
  return prompts;
}

std::vector<std::int32_t> encode_prompt(const PromptInput& prompt, const PromptEncoding& how) {
  std::vector<std::int32_t> ids = prompt.ids    ? *prompt.ids
                                  : prompt.text ? prompt_text_ids(*prompt.text, how, prompt.origin)
                                                : conversation_ids(prompt, how);
  for (std::int32_t id : ids) {
    if (id >= how.vocab) {
      throw UserError(fmt::format("{} holds token id {}, past the {} ids of {}'s vocabulary",
                                  prompt.origin, id, how.vocab, how.model),
                      fmt::format("give ids below {}", how.vocab), 2);
    }
  }
  return ids;
}

}  // namespace strata::tools
