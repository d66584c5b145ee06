#include "models/chat/chat_template.h"

#include <algorithm>

#include "models/chat/jinja_parser.h"
#include "models/chat/jinja_render.h"

namespace strata::models::chat {

struct ChatTemplate::Program {
  std::string origin;
  jinja::Template parsed;
};

namespace {

// The globals a variable may not replace: transformers.js refuses such a variable ("Variable
// already declared") before it renders.
bool is_global(int slot) {
  return slot >= jinja::kSlotNamespace && slot < jinja::kSlotCount;
}

int slot_of(const jinja::Template& parsed, const std::string& name) {
  const auto found = std::find(parsed.names.begin(), parsed.names.end(), name);
  return found == parsed.names.end() ? -1 : static_cast<int>(found - parsed.names.begin());
}

// The variables as transformers.js's apply_chat_template passes them: tools and documents are
// none when absent (Python's transformers passes None too), a special token the tokenizer does
// not have is not passed, and the extra variables come last, replacing any of the others.
jinja::Variables variables_of(const ChatTemplate::Program& program, const ChatInputs& inputs) {
  using jinja::Value;
  jinja::Variables variables;
  variables.emplace_back(jinja::kSlotMessages, jinja::from_json(inputs.messages));
  variables.emplace_back(jinja::kSlotTools, jinja::from_json(inputs.tools));
  variables.emplace_back(jinja::kSlotDocuments, Value::none());
  variables.emplace_back(jinja::kSlotAddGenerationPrompt,
                         Value::boolean(inputs.add_generation_prompt));
  if (!inputs.bos_token.empty()) {
    variables.emplace_back(jinja::kSlotBosToken, Value::string(inputs.bos_token));
  }
  if (!inputs.eos_token.empty()) {
    variables.emplace_back(jinja::kSlotEosToken, Value::string(inputs.eos_token));
  }
  if (inputs.extra.is_null()) return variables;
  if (!inputs.extra.is_object()) {
    throw TemplateError(program.origin + ": the extra variables must be a JSON object",
                        "pass the variables as {\"name\": value, ...}");
  }
  for (const auto& [name, json] : inputs.extra.items()) {
    const int slot = slot_of(program.parsed, name);
    if (is_global(slot)) {
      throw TemplateError(program.origin + ": the variable '" + name + "' would replace a global",
                          "rename the variable; '" + name + "' is the template's own");
    }
    if (slot < 0) continue;  // The template never reads it.
    const auto existing = std::find_if(variables.begin(), variables.end(),
                                       [slot](const auto& entry) { return entry.first == slot; });
    if (existing != variables.end()) variables.erase(existing);
    variables.emplace_back(slot, jinja::from_json(json));
  }
  return variables;
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string_view source, std::string origin) {
  auto program = std::make_unique<Program>();
  program->parsed = jinja::parse_template(source, origin);
  program->origin = std::move(origin);
  return ChatTemplate(std::move(program));
}

ChatTemplate::ChatTemplate(std::unique_ptr<const Program> program) : program_(std::move(program)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

std::string ChatTemplate::render(const ChatInputs& inputs) const {
  try {
    return jinja::render_template(program_->parsed, program_->origin,
                                  variables_of(*program_, inputs));
  } catch (const jinja::EvalError& error) {
    throw TemplateError(program_->origin + ": " + error.what(),
                        "the conversation does not fit the template; fix the conversation");
  }
}

const std::string& ChatTemplate::origin() const {
  return program_->origin;
}

}  // namespace strata::models::chat
