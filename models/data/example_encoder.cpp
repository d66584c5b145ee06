#include "models/data/example_encoder.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"
#include "models/data/loss_mask.h"

namespace strata::models {
namespace {

std::int32_t eos_of(const tokenizer::Tokenizer& tokenizer) {
  const std::optional<std::int32_t> eos = tokenizer.eos_id();
  if (eos) return *eos;
  throw UserError(fmt::format("the tokenizer {} names no end-of-sequence token, which goes "
                              "between documents",
                              tokenizer.source()),
                  "set \"eos_token\" in the tokenizer_config.json beside it", 2);
}

constexpr const char* kLineFix =
    "give each line {\"text\": \"...\"}, {\"prompt\": \"...\", \"completion\": \"...\"} or "
    "{\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, ...]} (docs/data.md)";

[[noreturn]] void refuse_line(const std::string& where, const std::string& what) {
  throw UserError(fmt::format("{} {}", where, what), kLineFix, 2);
}

// Ends the example with EOS when its ids do not already end with it; the EOS is in the loss.
void close_with_eos(EncodedExample& out, std::int32_t eos) {
  if (!out.ids.empty() && out.ids.back() == eos) return;
  out.ids.push_back(eos);
  out.mask.push_back(kInLoss);
}

}  // namespace

ExampleEncoder::ExampleEncoder(const tokenizer::Tokenizer& tokenizer, const ChatEncoder* chat,
                               bool add_special_tokens)
    : tokenizer_(&tokenizer),
      chat_(chat),
      add_special_tokens_(add_special_tokens),
      eos_(eos_of(tokenizer)) {}

void ExampleEncoder::encode(const TextDocuments& documents, std::size_t index,
                            EncodedExample& out) const {
  out.ids.clear();
  out.mask.clear();
  if (documents.json_lines()) {
    encode_line(documents.json_line(index), documents.where(index), out);
  } else {
    std::string scratch;
    encode_text(documents.document(index, scratch), out);
  }
  if (!out.mask.empty()) out.mask.front() |= kExampleStart;
}

void ExampleEncoder::encode_line(const nlohmann::ordered_json& line, const std::string& where,
                                 EncodedExample& out) const {
  const nlohmann::ordered_json none;
  const nlohmann::ordered_json& tools = line.contains("tools") ? line["tools"] : none;
  if (line.contains("messages")) {
    if (!line["messages"].is_array()) refuse_line(where, "has \"messages\" that is not a list");
    encode_chat(line["messages"], tools, 0, where, out);
  } else if (line.contains("prompt") && line.contains("completion")) {
    const nlohmann::ordered_json& prompt = line["prompt"];
    const nlohmann::ordered_json& completion = line["completion"];
    if (prompt.is_string() && completion.is_string()) {
      encode_completion(prompt.get<std::string>(), completion.get<std::string>(), out);
    } else if (prompt.is_array() && completion.is_array()) {
      nlohmann::ordered_json messages = prompt;
      messages.insert(messages.end(), completion.begin(), completion.end());
      encode_chat(messages, tools, prompt.size(), where, out);
    } else {
      refuse_line(where, fmt::format("has a \"prompt\" ({}) and a \"completion\" ({}) that are not "
                                     "both text or both lists of messages",
                                     prompt.type_name(), completion.type_name()));
    }
  } else if (line.contains("text") && line["text"].is_string()) {
    encode_text(line["text"].get_ref<const std::string&>(), out);
  } else {
    refuse_line(where, fmt::format("has none of the fields strata trains on (\"text\", \"prompt\" "
                                   "and \"completion\", \"messages\"); it has {}",
                                   json_field_names(line)));
  }
}

void ExampleEncoder::encode_text(std::string_view text, EncodedExample& out) const {
  tokenizer_->encode_into(text, add_special_tokens_, out.ids);
  out.mask.assign(out.ids.size(), kInLoss);
  close_with_eos(out, eos_);
}

// The prompt and completion are one text, as the model reads them; the loss starts at the first
// id the prompt's own encoding does not share with it.
void ExampleEncoder::encode_completion(const std::string& prompt, const std::string& completion,
                                       EncodedExample& out) const {
  tokenizer_->encode_into(prompt + completion, add_special_tokens_, out.ids);
  const std::vector<std::int32_t> prompt_ids = tokenizer_->encode(prompt, add_special_tokens_);
  const auto shared =
      std::mismatch(prompt_ids.begin(), prompt_ids.end(), out.ids.begin(), out.ids.end());
  const auto first = static_cast<std::size_t>(shared.second - out.ids.begin());
  out.mask.assign(out.ids.size(), kInLoss);
  std::fill(out.mask.begin(), out.mask.begin() + static_cast<std::ptrdiff_t>(first), 0);
  close_with_eos(out, eos_);
}

void ExampleEncoder::encode_chat(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, std::size_t first_trained,
                                 const std::string& where, EncodedExample& out) const {
  if (chat_ == nullptr) {
    throw UserError(fmt::format("{} is a conversation, but the folder of the tokenizer {} has no "
                                "chat template to render it with",
                                where, tokenizer_->source()),
                    "put the model's chat_template.jinja (or a tokenizer_config.json with "
                    "\"chat_template\") beside its tokenizer.json, or give the line as "
                    "{\"prompt\": \"...\", \"completion\": \"...\"} text",
                    2);
  }
  try {
    ChatEncoding encoding = chat_->encode(messages, tools, false, first_trained);
    out.ids = std::move(encoding.ids);
    out.mask.assign(encoding.in_loss.begin(), encoding.in_loss.end());
  } catch (const chat::TemplateError& error) {
    throw UserError(
        fmt::format("{}: the chat template refuses the conversation: {}", where, error.what()),
        error.fix().empty() ? std::string(kLineFix) : error.fix(), 2);
  }
}

}  // namespace strata::models
