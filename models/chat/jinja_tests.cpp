// The tests (`x is defined`), as @huggingface/jinja's Environment.TESTS defines them, plus
// `float`, which the reference lacks.
#include <array>
#include <cmath>

#include "models/chat/jinja_builtins.h"
#include "models/chat/jinja_text.h"

namespace strata::models::chat::jinja {

namespace {

constexpr std::array<std::pair<std::string_view, Test>, 20> kTests{{
    {"boolean", Test::boolean},
    {"callable", Test::callable},
    {"defined", Test::defined},
    {"eq", Test::eq},
    {"equalto", Test::equalto},
    {"even", Test::even},
    {"false", Test::false_},
    {"float", Test::float_},
    {"integer", Test::integer},
    {"iterable", Test::iterable},
    {"lower", Test::lower},
    {"mapping", Test::mapping},
    {"none", Test::none},
    {"number", Test::number},
    {"odd", Test::odd},
    {"sequence", Test::sequence},
    {"string", Test::string},
    {"true", Test::true_},
    {"undefined", Test::undefined},
    {"upper", Test::upper},
}};

bool parity(const Value& operand, bool odd) {
  if (operand.kind != Kind::integer) {
    throw EvalError(std::string("cannot ") + (odd ? "odd" : "even") + " on " +
                    type_name(operand.kind));
  }
  return (std::fmod(operand.number, 2) != 0) == odd;
}

}  // namespace

std::optional<Test> find_test(std::string_view name) {
  for (const auto& [known, test] : kTests) {
    if (known == name) return test;
  }
  return std::nullopt;
}

bool apply_test(Test test, const Value& operand, const Value* argument) {
  const Kind kind = operand.kind;
  switch (test) {
    case Test::boolean:
      return kind == Kind::boolean;
    case Test::callable:
      return kind == Kind::function;
    case Test::odd:
      return parity(operand, true);
    case Test::even:
      return parity(operand, false);
    case Test::false_:
      return kind == Kind::boolean && operand.number == 0;
    case Test::true_:
      return kind == Kind::boolean && operand.number != 0;
    case Test::none:
      return kind == Kind::none;
    case Test::string:
      return kind == Kind::string;
    case Test::number:
      return operand.is_number();
    case Test::integer:
      return kind == Kind::integer;
    case Test::float_:
      return kind == Kind::floating;
    // The reference's `iterable` is a list (not a tuple) or a string; `mapping` is not a namespace.
    case Test::iterable:
      return kind == Kind::list || kind == Kind::string;
    case Test::mapping:
      return operand.is_object();
    case Test::sequence:
      return operand.is_list() || operand.is_object() || kind == Kind::string;
    case Test::lower:
      return kind == Kind::string && operand.str() == js_lower(operand.str());
    case Test::upper:
      return kind == Kind::string && operand.str() == js_upper(operand.str());
    case Test::defined:
      return kind != Kind::undefined;
    case Test::undefined:
      return kind == Kind::undefined;
    case Test::eq:
    case Test::equalto:
      if (argument == nullptr) throw EvalError("the test equalto needs a value to compare with");
      return strict_equals(operand, *argument);
  }
  return false;
}

}  // namespace strata::models::chat::jinja
