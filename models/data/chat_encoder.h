#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/chat/chat_template.h"
#include "models/tokenizer/tokenizer.h"

namespace strata::models {

// A conversation as training and `strata tokenize --chat` see it: the rendered text, its ids,
// and which ids the loss counts (1) or leaves out (0).
struct ChatEncoding {
  std::string text;
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> in_loss;
};

// A model folder's chat template with its tokenizer: renders a conversation, encodes it as
// transformers' apply_chat_template(tokenize=True) does (without the post-processor's tokens: the
// template writes its own BOS), and finds the assistant turns (docs/chat.md, "The loss on the
// answers"). The tokenizer must outlive the encoder.
class ChatEncoder {
 public:
  // The chat template beside `tokenizer`'s tokenizer.json: the folder's chat_template.jinja, else
  // tokenizer_config.json's "chat_template", a string or a list of named templates ("default",
  // and "tool_use" for conversations with tools, as transformers picks). None when the folder
  // has neither. Throws UserError naming the file for a template that does not parse.
  static std::optional<ChatEncoder> for_tokenizer(const tokenizer::Tokenizer& tokenizer);

  // From template sources; `tool_use` "" when there is none. `origin` names them in errors.
  ChatEncoder(const tokenizer::Tokenizer& tokenizer, std::string_view default_template,
              std::string_view tool_use, const std::string& origin);

  // `messages` (with `tools`, null for none) rendered, encoded and masked: the loss counts the
  // tokens of each assistant message from `first_trained` on, from where a generation prompt
  // ends through the token that closes the turn (models/data/chat_encoder.cpp, mark_turn). Throws
  // chat::TemplateError for a conversation the template refuses or renders in a way no turn can be
  // found in.
  ChatEncoding encode(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                      bool add_generation_prompt, std::size_t first_trained = 0) const;

  // The token that ends an assistant's turn under this template (Qwen's <|im_end|>, Llama 3's
  // <|eot_id|>): the first special token the template writes after an answer, else EOS.
  std::optional<std::int32_t> end_of_turn() const { return end_of_turn_; }
  // CRC32C of the template sources, for the token cache's key.
  std::uint32_t template_hash() const { return template_hash_; }

 private:
  const chat::ChatTemplate& pick(const nlohmann::ordered_json& tools) const;
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt) const;
  std::optional<std::int32_t> find_end_of_turn() const;
  std::size_t turn_start(const nlohmann::ordered_json& messages,
                         const nlohmann::ordered_json& tools, std::size_t index,
                         std::size_t searched, const std::string& text) const;
  std::size_t mark_turn(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                        std::size_t index, std::size_t searched, ChatEncoding& encoding) const;
  std::size_t turn_close(std::span<const std::int32_t> ids, std::size_t first,
                         std::size_t stop) const;
  std::size_t content_end(const nlohmann::ordered_json& message, const ChatEncoding& encoding,
                          std::size_t start, std::size_t first) const;
  std::size_t token_at(const ChatEncoding& encoding, std::size_t offset) const;

  const tokenizer::Tokenizer* tokenizer_;
  std::string bos_token_;  // the template's bos_token and eos_token, read once
  std::string eos_token_;
  chat::ChatTemplate default_;
  std::optional<chat::ChatTemplate> tool_use_;
  std::optional<std::int32_t> end_of_turn_;
  std::uint32_t template_hash_ = 0;
};

}  // namespace strata::models
