#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace strata::models::chat {

// A template that refused to render: raise_exception's message, or an error of evaluation naming
// the template and line. The data path names the file and line of the conversation around it.
class TemplateError : public UserError {
 public:
  using UserError::UserError;
};

// What a chat template is rendered with: the variables transformers' apply_chat_template passes.
struct ChatInputs {
  // Ordered as the user wrote them: tojson prints a tool's keys in its own order.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role": ..., ...}]
  nlohmann::ordered_json tools;  // null when the conversation has none
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  // Further variables (enable_thinking, say): an object, or null.
  nlohmann::ordered_json extra;
};

// A model folder's chat template (tokenizer_config.json's "chat_template", Jinja), parsed once
// and rendered as @huggingface/jinja renders it (trim_blocks and lstrip_blocks on, as
// transformers sets them). The part of Jinja it interprets is listed in docs/chat.md; any other
// construct is refused at parse time naming the template line. Rendering is safe from many
// threads at once.
class ChatTemplate {
 public:
  // Parses `source`. `origin` names the template in errors ("Qwen3/tokenizer_config.json's
  // chat_template"). Throws UserError naming origin, line and construct for a syntax error or a
  // construct outside the supported set.
  static ChatTemplate parse(std::string_view source, std::string origin);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // The rendered text. Throws TemplateError for raise_exception (its message) or a runtime error
  // (naming origin and line: an unknown filter argument, a call on the wrong type, ...).
  std::string render(const ChatInputs& inputs) const;

  const std::string& origin() const;

  struct Program;

 private:
  explicit ChatTemplate(std::unique_ptr<const Program> program);
  std::unique_ptr<const Program> program_;
};

}  // namespace strata::models::chat
