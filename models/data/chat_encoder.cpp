#include "models/data/chat_encoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <system_error>

#include "aio/crc32c.h"
#include "base/error.h"

namespace strata::models {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UserError(fmt::format("cannot read {}", path.string()), "check the file's permissions",
                    2);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

struct TemplateSources {
  std::string default_template;
  std::string tool_use;  // "" when there is none
  std::string origin;
};

// tokenizer_config.json's "chat_template": a string, or [{"name": ..., "template": ...}, ...].
std::optional<TemplateSources> config_templates(const std::filesystem::path& config_path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(config_path, error)) return std::nullopt;
  const nlohmann::json config = nlohmann::json::parse(read_text(config_path), nullptr, false);
  if (!config.is_object() || !config.contains("chat_template")) return std::nullopt;
  const nlohmann::json& field = config["chat_template"];
  TemplateSources sources{"", "", config_path.string() + "'s chat_template"};
  if (field.is_string()) {
    sources.default_template = field.get<std::string>();
    return sources;
  }
  if (field.is_array()) {
    for (const nlohmann::json& named : field) {
      if (!named.is_object() || !named.value("name", nlohmann::json()).is_string() ||
          !named.value("template", nlohmann::json()).is_string()) {
        continue;
      }
      const std::string name = named["name"].get<std::string>();
      if (name == "default") sources.default_template = named["template"].get<std::string>();
      if (name == "tool_use") sources.tool_use = named["template"].get<std::string>();
    }
    if (!sources.default_template.empty()) return sources;
  }
  throw UserError(fmt::format("{} is neither a string nor a list of named templates with a "
                              "\"default\"",
                              sources.origin),
                  "give \"chat_template\" as a Jinja string, as transformers writes it", 2);
}

// Text both probe messages carry: no template changes them, and no tokenizer makes a special
// token of them.
constexpr const char* kProbeQuestion = "strata probe question";
constexpr const char* kProbeAnswer = "strata probe answer";

}  // namespace

std::optional<ChatEncoder> ChatEncoder::for_tokenizer(const tokenizer::Tokenizer& tokenizer) {
  const std::filesystem::path folder = std::filesystem::path(tokenizer.source()).parent_path();
  const std::filesystem::path jinja = folder / "chat_template.jinja";
  std::error_code error;
  if (std::filesystem::is_regular_file(jinja, error))
    return ChatEncoder(tokenizer, read_text(jinja), "", jinja.string());
  const std::optional<TemplateSources> sources = config_templates(folder / "tokenizer_config.json");
  if (!sources) return std::nullopt;
  return ChatEncoder(tokenizer, sources->default_template, sources->tool_use, sources->origin);
}

ChatEncoder::ChatEncoder(const tokenizer::Tokenizer& tokenizer, std::string_view default_template,
                         std::string_view tool_use, const std::string& origin)
    : tokenizer_(&tokenizer), default_(chat::ChatTemplate::parse(default_template, origin)) {
  if (!tool_use.empty()) tool_use_ = chat::ChatTemplate::parse(tool_use, origin + " (tool_use)");
  end_of_turn_ = find_end_of_turn();
  aio::Crc32c crc;
  crc.update(std::as_bytes(std::span(default_template.data(), default_template.size())));
  crc.update(std::as_bytes(std::span(tool_use.data(), tool_use.size())));
  template_hash_ = crc.value();
}

const chat::ChatTemplate& ChatEncoder::pick(const nlohmann::ordered_json& tools) const {
  const bool has_tools = tools.is_array() && !tools.empty();
  return has_tools && tool_use_ ? *tool_use_ : default_;
}

std::string ChatEncoder::render(const nlohmann::ordered_json& messages,
                                const nlohmann::ordered_json& tools,
                                bool add_generation_prompt) const {
  chat::ChatInputs inputs;
  inputs.messages = messages;
  inputs.tools = tools;
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.bos_token = tokenizer_->bos_token();
  inputs.eos_token = tokenizer_->eos_token();
  return pick(tools).render(inputs);
}

// Renders a question and its answer and takes the first special token after the answer. A
// template that refuses the probe ends turns with EOS.
std::optional<std::int32_t> ChatEncoder::find_end_of_turn() const {
  const nlohmann::ordered_json probe =
      nlohmann::ordered_json::array({{{"role", "user"}, {"content", kProbeQuestion}},
                                     {{"role", "assistant"}, {"content", kProbeAnswer}}});
  try {
    const std::string text = render(probe, nullptr, false);
    const std::size_t answer = text.find(kProbeAnswer);
    if (answer != std::string::npos) {
      const std::string after = text.substr(answer + std::string_view(kProbeAnswer).size());
      for (const std::int32_t id : tokenizer_->encode(after, false)) {
        if (tokenizer_->is_special(id)) return id;
      }
    }
  } catch (const chat::TemplateError&) {
    // The template takes no such conversation (one that needs a system message first, say).
  }
  return tokenizer_->eos_id();
}

ChatEncoding ChatEncoder::encode(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 std::size_t first_trained) const {
  ChatEncoding encoding;
  encoding.text = render(messages, tools, add_generation_prompt);
  tokenizer_->encode_into(encoding.text, false, encoding.ids);
  encoding.in_loss.assign(encoding.ids.size(), 0);
  for (std::size_t i = first_trained; i < messages.size(); ++i) {
    if (messages[i].is_object() && messages[i].value("role", "") == "assistant")
      mark_turn(messages, tools, i, encoding);
  }
  return encoding;
}

// Assistant message `index`'s tokens into the loss: from where the conversation before it, with
// the generation prompt, ends (the ids the two texts share) through the first end-of-turn token.
void ChatEncoder::mark_turn(const nlohmann::ordered_json& messages,
                            const nlohmann::ordered_json& tools, std::size_t index,
                            ChatEncoding& encoding) const {
  const nlohmann::ordered_json before(messages.begin(),
                                      messages.begin() + static_cast<std::ptrdiff_t>(index));
  const std::string prompt = render(before, tools, true);
  if (!encoding.text.starts_with(prompt)) {
    throw chat::TemplateError(
        fmt::format("{} renders the conversation before message {} (an assistant's) as a text "
                    "the whole conversation does not start with, so the assistant's turn cannot "
                    "be found in it",
                    pick(tools).origin(), index + 1),
        "give the conversation as \"prompt\" and \"completion\" messages, the completion the "
        "assistant's last turn (docs/chat.md)",
        2);
  }
  const std::vector<std::int32_t> prompt_ids = tokenizer_->encode(prompt, false);
  const auto shared =
      std::mismatch(prompt_ids.begin(), prompt_ids.end(), encoding.ids.begin(), encoding.ids.end());
  auto first = static_cast<std::size_t>(shared.second - encoding.ids.begin());
  std::size_t last = first;
  while (last < encoding.ids.size() && encoding.ids[last] != end_of_turn_)
    ++last;
  if (last < encoding.ids.size()) ++last;  // the end-of-turn token is the assistant's to write
  std::fill(encoding.in_loss.begin() + static_cast<std::ptrdiff_t>(first),
            encoding.in_loss.begin() + static_cast<std::ptrdiff_t>(last), 1);
}

}  // namespace strata::models
