#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "models/data/chat_encoder.h"
#include "models/data/text_documents.h"
#include "models/tokenizer/tokenizer.h"

namespace strata::models {

// One example's ids and their mask bits (models/data/loss_mask.h), kExampleStart on the first.
struct EncodedExample {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;
};

// Makes training examples of the documents of a text file (docs/data.md):
// - a .txt file, or a line's "text": every token in the loss, then EOS;
// - "prompt" and "completion" text: encoded together as one text, the loss on the completion's
//   tokens and the EOS after them, as TRL's completion_only_loss;
// - "messages" (with "tools"), or "prompt" and "completion" lists of messages: the chat template
//   rendered, the loss on the assistant turns (models/data/chat_encoder.h).
// Safe from many threads at once; the tokenizer and chat encoder must outlive it.
class ExampleEncoder {
 public:
  // `chat` nullptr: the folder has no chat template, and conversations are refused naming it.
  // Throws UserError naming the tokenizer when it has no EOS.
  ExampleEncoder(const tokenizer::Tokenizer& tokenizer, const ChatEncoder* chat,
                 bool add_special_tokens);

  // Document `index` of `documents` into `out`. Throws UserError naming the file and line for a
  // line with none of the fields above, fields of the wrong type, or a conversation the template
  // refuses.
  void encode(const TextDocuments& documents, std::size_t index, EncodedExample& out) const;

 private:
  void encode_text(std::string_view text, EncodedExample& out) const;
  void encode_completion(const std::string& prompt, const std::string& completion,
                         EncodedExample& out) const;
  void encode_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                   std::size_t first_trained, const std::string& where, EncodedExample& out) const;
  void encode_line(const nlohmann::ordered_json& line, const std::string& where,
                   EncodedExample& out) const;

  const tokenizer::Tokenizer* tokenizer_;
  const ChatEncoder* chat_;
  bool add_special_tokens_;
  std::int32_t eos_;
};

}  // namespace strata::models
