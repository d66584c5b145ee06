#pragma once

#include <string>
#include <utility>
#include <vector>

#include "models/chat/jinja_ast.h"
#include "models/chat/jinja_value.h"

// Renders a parsed template as @huggingface/jinja's Interpreter does: one scope per for loop
// (a `set` inside a loop does not outlive it; a namespace does), macros called in the scope of
// their caller, break and continue dropping what their iteration printed.
namespace strata::models::chat::jinja {

// The variables of one render, by slot: the globals are added by render_template.
using Variables = std::vector<std::pair<int, Value>>;

// The rendered text. Throws TemplateError (models/chat/chat_template.h) naming `origin` and the
// line for an error of evaluation, or with raise_exception's message.
std::string render_template(const Template& program, const std::string& origin,
                            Variables variables);

}  // namespace strata::models::chat::jinja
