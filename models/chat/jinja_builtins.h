#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/chat/jinja_value.h"

// The filters, tests, methods and global functions a chat template may use. The parser looks a
// name up here once and refuses one that is not listed; the renderer calls the functions below
// with the enumerator it kept.
namespace strata::models::chat::jinja {

struct Stmt;

// Where @huggingface/jinja always raises for a name (count, d, escape/e, select/reject, default
// without parentheses), strata does what Python's Jinja does instead: docs/chat.md lists these.
enum class Filter : std::uint8_t {
  abs,
  capitalize,
  count,
  d,
  default_,
  dictsort,
  e,
  escape,
  first,
  float_,
  indent,
  int_,
  items,
  join,
  last,
  length,
  list,
  lower,
  map,
  reject,
  rejectattr,
  replace,
  reverse,
  safe,
  select,
  selectattr,
  sort,
  string,
  title,
  tojson,
  trim,
  unique,
  upper,
};
enum class Test : std::uint8_t {
  boolean,
  callable,
  defined,
  eq,
  equalto,
  even,
  false_,
  float_,
  integer,
  iterable,
  lower,
  mapping,
  none,
  number,
  odd,
  sequence,
  string,
  true_,
  undefined,
  upper,
};
enum class Method : std::uint8_t {
  capitalize,
  dictsort,
  endswith,
  get,
  items,
  keys,
  lower,
  lstrip,
  replace,
  rstrip,
  split,
  startswith,
  strip,
  title,
  upper,
  values,
};
enum class Function : std::uint8_t { namespace_, raise_exception, range, strftime_now };

std::optional<Filter> find_filter(std::string_view name);
std::optional<Test> find_test(std::string_view name);
std::optional<Method> find_method(std::string_view name);
std::optional<Function> find_function(std::string_view name);

// A call's evaluated arguments.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  const Value* find(std::string_view keyword_name) const;
  // As the reference hands them to a function: the positional ones, then the keyword ones as one
  // kwargs dict when there are any.
  std::vector<Value> flattened() const;
};

// A function value: a global function, a macro of the template, or a method bound to its value.
struct Callable {
  enum class Type : std::uint8_t { function, macro, method };
  Type type = Type::function;
  Function function{};
  const Stmt* macro = nullptr;
  Method method{};
  Value self;
};

// `operand | filter` (called: written with parentheses, which changes what several filters do in
// the reference).
Value apply_filter(Filter filter, bool called, const Value& operand, const Args& args);
// `operand is test`; `argument` is selectattr's third argument.
bool apply_test(Test test, const Value& operand, const Value* argument);

// `object.name`, `object[property]`: a dict's entry, else a method bound to the value, a string's
// or list's `length`, an index into a list or string; undefined when there is none.
Value get_member(const Value& object, const Value& property);
// The method `name` of `object` where it has one (a string's `upper`, a dict's `get`).
std::optional<Method> member_method(const Value& object, std::string_view name);
Value call_method(Method method, const Value& self, const std::vector<Value>& args);
// range, namespace and strftime_now (raise_exception is the renderer's: it names the line).
Value call_function(Function function, const Args& args);

// `value[start:stop:step]` of a list or string (by code point), Python's slice rules.
Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step);

}  // namespace strata::models::chat::jinja
