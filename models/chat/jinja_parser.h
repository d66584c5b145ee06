#pragma once

#include <string>
#include <string_view>

#include "models/chat/jinja_ast.h"

namespace strata::models::chat::jinja {

// Parses a chat template as @huggingface/jinja parses it. Throws UserError naming `origin`, the
// line and the construct for a syntax error or anything outside what strata renders (an unknown
// statement, filter, test, method or function, call and filter blocks, argument unpacking).
Template parse_template(std::string_view source, const std::string& origin);

}  // namespace strata::models::chat::jinja
