#include "models/chat/jinja_operators.h"

#include <cmath>

#include "models/chat/jinja_text.h"

namespace strata::models::chat::jinja {

namespace {

const char* symbol(Operator op) {
  switch (op) {
    case Operator::add:
      return "+";
    case Operator::subtract:
      return "-";
    case Operator::multiply:
      return "*";
    case Operator::divide:
      return "/";
    case Operator::floor_divide:
      return "//";
    case Operator::modulo:
      return "%";
    case Operator::power:
      return "**";
    case Operator::concat:
      return "~";
    case Operator::less:
      return "<";
    case Operator::greater:
      return ">";
    case Operator::less_equal:
      return "<=";
    case Operator::greater_equal:
      return ">=";
    case Operator::in:
      return "in";
    case Operator::not_in:
      return "not in";
    default:
      return "?";
  }
}

bool numeric_like(const Value& value) {
  return value.is_number() || value.kind == Kind::boolean;
}

Value power(const Value& left, const Value& right) {
  const double a = left.number;
  const double b = right.number;
  if (a == 0 && b < 0) throw EvalError("0.0 cannot be raised to a negative power");
  const double result = std::pow(a, b);
  if (!std::isfinite(result)) throw EvalError("Exponentiation result is not a finite real number");
  const bool floating = left.kind == Kind::floating || right.kind == Kind::floating || b < 0;
  return floating ? Value::floating(result) : Value::integer(result);
}

// Both operands are numbers; nullopt for an operator numbers do not have (`in`).
std::optional<Value> arithmetic(Operator op, const Value& left, const Value& right) {
  const double a = left.number;
  const double b = right.number;
  const bool floating = left.kind == Kind::floating || right.kind == Kind::floating;
  const auto number = [floating](double n) {
    return floating ? Value::floating(n) : Value::integer(n);
  };
  switch (op) {
    case Operator::add:
      return number(a + b);
    case Operator::subtract:
      return number(a - b);
    case Operator::multiply:
      return number(a * b);
    case Operator::divide:
      return Value::floating(a / b);
    case Operator::floor_divide:
      return number(std::floor(a / b));
    case Operator::modulo:
      return number(std::fmod(a, b));
    case Operator::less:
      return Value::boolean(a < b);
    case Operator::greater:
      return Value::boolean(a > b);
    case Operator::greater_equal:
      return Value::boolean(a >= b);
    case Operator::less_equal:
      return Value::boolean(a <= b);
    default:
      return std::nullopt;
  }
}

// What the reference's chain of type checks leaves to strings and dicts.
std::optional<Value> textual(Operator op, const Value& left, const Value& right) {
  const bool in = op == Operator::in || op == Operator::not_in;
  if ((left.kind == Kind::string || right.kind == Kind::string) && op == Operator::add) {
    return Value::string(to_js_string(left) + to_js_string(right));
  }
  if (left.kind == Kind::string && right.kind == Kind::string && in) {
    const bool found = right.str().find(left.str()) != std::string::npos;
    return Value::boolean(found == (op == Operator::in));
  }
  if (left.kind == Kind::string && right.is_object() && in) {
    const bool found = right.map().find(left.str()) != nullptr;
    return Value::boolean(found == (op == Operator::in));
  }
  return std::nullopt;
}

}  // namespace

Value binary_operation(Operator op, const Value& left, const Value& right) {
  if (op == Operator::equal) return Value::boolean(loose_equals(left, right));
  if (op == Operator::not_equal) return Value::boolean(!loose_equals(left, right));
  const bool in = op == Operator::in || op == Operator::not_in;
  if (left.kind == Kind::undefined || right.kind == Kind::undefined) {
    // `anything in undefined` is false.
    if (right.kind == Kind::undefined && in) return Value::boolean(op == Operator::not_in);
    throw EvalError(std::string("Cannot perform operation ") + symbol(op) + " on undefined values");
  }
  if (left.kind == Kind::none || right.kind == Kind::none) {
    throw EvalError("Cannot perform operation on null values");
  }
  if (op == Operator::concat) return Value::string(to_js_string(left) + to_js_string(right));
  if (op == Operator::power && numeric_like(left) && numeric_like(right)) return power(left, right);
  if (left.is_number() && right.is_number()) {
    if (auto result = arithmetic(op, left, right)) return *result;
  } else if (left.is_list() && right.is_list()) {
    if (op == Operator::add) {
      std::vector<Value> items = left.items();
      items.insert(items.end(), right.items().begin(), right.items().end());
      return Value::list(std::move(items));
    }
  } else if (right.is_list() && in) {
    bool found = false;
    for (const Value& item : right.items())
      found = found || strict_equals(item, left);
    return Value::boolean(found == (op == Operator::in));
  }
  if (auto result = textual(op, left, right)) return *result;
  throw EvalError(std::string("Unknown operator \"") + symbol(op) + "\" between " +
                  type_name(left.kind) + " and " + type_name(right.kind));
}

Value sign_operation(Operator op, const Value& operand) {
  if (!numeric_like(operand)) {
    throw EvalError(std::string("Unknown operator \"") + (op == Operator::negate ? "-" : "+") +
                    "\" for " + type_name(operand.kind));
  }
  const double value = op == Operator::negate ? -operand.number : operand.number;
  return operand.kind == Kind::floating ? Value::floating(value) : Value::integer(value);
}

}  // namespace strata::models::chat::jinja
