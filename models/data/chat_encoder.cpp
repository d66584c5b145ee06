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

// The length of the longest common prefix of `a` and `b`, backed off to a whole UTF-8 character.
std::size_t shared_prefix(std::string_view a, std::string_view b) {
  std::size_t n = static_cast<std::size_t>(
      std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
  while (n > 0 && n < a.size() && (static_cast<unsigned char>(a[n]) & 0xC0) == 0x80)
    --n;
  return n;
}

// A message's content as templates often write it, trimmed of blanks; "" when it has no text.
std::string_view visible_content(const nlohmann::ordered_json& message) {
  const auto* content = message.is_object() && message.contains("content")
                            ? message["content"].get_ptr<const std::string*>()
                            : nullptr;
  if (content == nullptr) return {};
  const std::size_t from = content->find_first_not_of(" \t\r\n");
  if (from == std::string::npos) return {};
  const std::size_t to = content->find_last_not_of(" \t\r\n") + 1;
  return std::string_view(*content).substr(from, to - from);
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
    : tokenizer_(&tokenizer),
      bos_token_(tokenizer.bos_token()),
      eos_token_(tokenizer.eos_token()),
      default_(chat::ChatTemplate::parse(default_template, origin)) {
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
  inputs.bos_token = bos_token_;
  inputs.eos_token = eos_token_;
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
  std::size_t searched = 0;  // where the last turn started, in the text
  for (std::size_t i = first_trained; i < messages.size(); ++i) {
    if (messages[i].is_object() && messages[i].value("role", "") == "assistant")
      searched = mark_turn(messages, tools, i, searched, encoding);
  }
  return encoding;
}

// Where assistant message `index`'s turn starts in `text`: where the conversation before it,
// rendered with the generation prompt, stops being a prefix of the whole. Some templates close
// the prompt differently when it ends there (DeepSeek-V3 closes a tool's outputs that the next
// tool call leaves open): what the two do not share is markup then. Others move a message's
// text with the end of the conversation (Mistral's put the system message into the last user
// turn): the turn then starts where the message's own content shows, after `searched`.
std::size_t ChatEncoder::turn_start(const nlohmann::ordered_json& messages,
                                    const nlohmann::ordered_json& tools, std::size_t index,
                                    std::size_t searched, const std::string& text) const {
  const nlohmann::ordered_json before(messages.begin(),
                                      messages.begin() + static_cast<std::ptrdiff_t>(index));
  const std::string prompt = render(before, tools, true);
  const std::size_t start = shared_prefix(prompt, text);
  const std::string_view unshared = std::string_view(prompt).substr(start);
  const bool moved = std::any_of(before.begin(), before.end(), [&](const auto& message) {
    const std::string_view content = visible_content(message);
    return !content.empty() && unshared.find(content) != std::string_view::npos;
  });
  if (!moved) return start;
  const std::string_view own = visible_content(messages[index]);
  const std::size_t found = own.empty() ? std::string::npos : text.find(own, searched);
  if (found != std::string::npos) return found;
  throw chat::TemplateError(
      fmt::format("{} renders the conversation before message {} (an assistant's) other than the "
                  "whole conversation does, and the message's content is not in the whole, so "
                  "the assistant's turn cannot be found in it",
                  pick(tools).origin(), index + 1),
      "give the conversation as \"prompt\" and \"completion\" messages, the completion the "
      "assistant's last turn (docs/chat.md)",
      2);
}

// Assistant message `index`'s tokens into the loss: from where its turn starts (turn_start)
// through the token that ends it. The conversation up to and including the message, rendered,
// shares ids of the turn with the whole: the turn closes with the last end-of-turn token of those
// (so that one written inside the content does not end it; turn_close). Where it shares none
// (Qwen3 shows the reasoning of a last turn only), the first end-of-turn token after the
// message's content closes it.
std::size_t ChatEncoder::mark_turn(const nlohmann::ordered_json& messages,
                                   const nlohmann::ordered_json& tools, std::size_t index,
                                   std::size_t searched, ChatEncoding& encoding) const {
  const std::size_t start = turn_start(messages, tools, index, searched, encoding.text);
  const nlohmann::ordered_json through(messages.begin(),
                                       messages.begin() + static_cast<std::ptrdiff_t>(index) + 1);
  const std::size_t end = shared_prefix(render(through, tools, false), encoding.text);
  const std::size_t first = token_at(encoding, start);
  const std::size_t stop = end > start ? token_at(encoding, end) : first;
  std::size_t last = stop;
  if (stop > first) {
    last = turn_close(encoding.ids, first, stop);
  } else {
    last = content_end(messages[index], encoding, start, first);
    while (last < encoding.ids.size() && encoding.ids[last] != end_of_turn_)
      ++last;
    if (last < encoding.ids.size()) ++last;  // the end-of-turn token is the assistant's to write
  }
  std::fill(encoding.in_loss.begin() + static_cast<std::ptrdiff_t>(first),
            encoding.in_loss.begin() + static_cast<std::ptrdiff_t>(last), 1);
  return start;
}

// The end of the turn in ids [first, stop): just past its last end-of-turn token, else past its
// last special token (some templates write a header after the turn: Llama 3's always writes the
// next assistant's), else `stop`.
std::size_t ChatEncoder::turn_close(std::span<const std::int32_t> ids, std::size_t first,
                                    std::size_t stop) const {
  for (std::size_t i = stop; i > first; --i) {
    if (ids[i - 1] == end_of_turn_) return i;
  }
  for (std::size_t i = stop; i > first; --i) {
    if (tokenizer_->is_special(ids[i - 1])) return i;
  }
  return stop;
}

// The first id after `message`'s content where the text shows it from `start` on (trimmed, as
// templates often write it), else `first`.
std::size_t ChatEncoder::content_end(const nlohmann::ordered_json& message,
                                     const ChatEncoding& encoding, std::size_t start,
                                     std::size_t first) const {
  const std::string_view visible = visible_content(message);
  if (visible.empty()) return first;
  const std::size_t at = encoding.text.find(visible, start);
  return at == std::string::npos ? first : std::max(first, token_at(encoding, at + visible.size()));
}

// The index of the first id of `encoding` past text[0, offset): the ids that text's own
// encoding shares with the whole's.
std::size_t ChatEncoder::token_at(const ChatEncoding& encoding, std::size_t offset) const {
  const std::vector<std::int32_t> prefix =
      tokenizer_->encode(std::string_view(encoding.text).substr(0, offset), false);
  const auto shared =
      std::mismatch(prefix.begin(), prefix.end(), encoding.ids.begin(), encoding.ids.end());
  return static_cast<std::size_t>(shared.second - encoding.ids.begin());
}

}  // namespace strata::models
