#pragma once

#include "models/chat/jinja_ast.h"
#include "models/chat/jinja_value.h"

// The operators, as @huggingface/jinja evaluates them: numbers as JavaScript numbers (so `%`
// keeps the dividend's sign and `/` always makes a float), `==` as JavaScript's loose equality,
// `+` joining strings with anything, `in` over lists, strings and dict keys. Throws EvalError
// where the reference throws.
namespace strata::models::chat::jinja {

// Every binary operator but `and` and `or`, which the renderer short-circuits.
Value binary_operation(Operator op, const Value& left, const Value& right);
// Unary `-` and `+` (`not` is the renderer's).
Value sign_operation(Operator op, const Value& operand);

}  // namespace strata::models::chat::jinja
