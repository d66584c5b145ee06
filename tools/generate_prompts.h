#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/data/chat_encoder.h"
#include "models/tokenizer/tokenizer.h"

namespace strata::tools {

// One prompt `strata generate` continues: text, ids, or a conversation to render with the
// model's chat template and its generation prompt. `origin` names it in errors ("--prompt",
// "prompts.jsonl line 3").
struct PromptInput {
  std::optional<std::string> text;
  std::optional<std::vector<std::int32_t>> ids;
  std::optional<nlohmann::ordered_json> messages;  // a conversation: [{"role", "content"}, ...]
  nlohmann::ordered_json tools;                    // its tools, or null
  std::string origin;
};

// --prompt-ids: ids separated by commas ("1,2,3"). Throws UserError naming the item that is not
// a token id.
PromptInput prompt_from_ids(std::string_view list);
// --chat: a JSON file holding the conversation's messages, or an object with "messages" (and
// optionally "tools").
PromptInput prompt_from_chat_file(const std::filesystem::path& path);
// --prompts: one JSON object per line, each with one of "prompt" (text), "prompt_ids" (a list of
// ids) or "messages" (a conversation, with "tools" beside it if any). Empty lines are skipped.
std::vector<PromptInput> prompts_from_file(const std::filesystem::path& path);

// How the model turns text into ids: its folder's tokenizer (and chat template), or bytes (the
// built-in models, without a folder).
struct PromptEncoding {
  const models::tokenizer::Tokenizer* tokenizer = nullptr;
  const models::ChatEncoder* chat = nullptr;
  bool bytes = false;
  std::int64_t vocab = 0;  // the model's: every id must be below it
  std::string model;       // names the model in errors ("gpt2/config.json", "the built-in GPT")
};

// The prompt's ids: text encoded as transformers' generate pipelines encode it (the tokenizer's
// special tokens added), a conversation rendered with the generation prompt. Throws UserError
// naming the prompt and the fix for text without a tokenizer, a conversation without a chat
// template, or an id past the vocabulary.
std::vector<std::int32_t> encode_prompt(const PromptInput& prompt, const PromptEncoding& how);

}  // namespace strata::tools
