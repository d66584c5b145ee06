#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

// The values a chat template computes with, as @huggingface/jinja's runtime has them: undefined,
// none, booleans, integers and floats (both JavaScript numbers, so arithmetic, division and
// printing follow JavaScript), strings, lists (and tuples), dicts (and keyword arguments and
// namespaces, insertion-ordered) and functions. Lists and dicts are shared, so that `==` and `in`
// compare them by identity as JavaScript does and a namespace is changed in place.
namespace strata::models::chat::jinja {

enum class Kind : std::uint8_t {
  undefined,
  none,
  boolean,
  integer,
  floating,
  string,
  list,
  tuple,
  dict,
  kwargs,  // the keyword arguments of a call, passed as a dict after the positional ones
  name_space,
  function,
};

// An error of evaluation; the renderer adds the template's origin and line.
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Value;
struct List {
  std::vector<Value> items;
};
struct Dict;
struct Callable;

struct Value {
  Kind kind = Kind::undefined;
  double number = 0;  // boolean (0 or 1), integer, floating
  std::variant<std::monostate, std::shared_ptr<const std::string>, std::shared_ptr<List>,
               std::shared_ptr<Dict>, std::shared_ptr<const Callable>>
      payload;

  static Value none() { return Value{Kind::none, 0, {}}; }
  static Value boolean(bool b) { return Value{Kind::boolean, b ? 1.0 : 0.0, {}}; }
  static Value integer(double n) { return Value{Kind::integer, n, {}}; }
  static Value floating(double n) { return Value{Kind::floating, n, {}}; }
  static Value string(std::string text);
  static Value list(std::vector<Value> items, Kind kind = Kind::list);
  static Value dict(Kind kind = Kind::dict);
  static Value function(std::shared_ptr<const Callable> callable);

  bool is_number() const { return kind == Kind::integer || kind == Kind::floating; }
  bool is_list() const { return kind == Kind::list || kind == Kind::tuple; }
  // An ObjectValue in the reference: a dict or keyword arguments (not a namespace).
  bool is_object() const { return kind == Kind::dict || kind == Kind::kwargs; }
  bool is_mapping() const { return is_object() || kind == Kind::name_space; }
  const std::string& str() const { return *std::get<std::shared_ptr<const std::string>>(payload); }
  std::vector<Value>& items() const { return std::get<std::shared_ptr<List>>(payload)->items; }
  Dict& map() const { return *std::get<std::shared_ptr<Dict>>(payload); }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(payload); }
};

struct Dict {
  std::vector<std::pair<std::string, Value>> entries;

  const Value* find(std::string_view key) const;
  // Replaces the value of an existing key where it stands, as Map.set does.
  void set(std::string key, Value value);
};

// The reference's type names ("StringValue"), for error messages.
const char* type_name(Kind kind);

// __bool__: empty strings, lists and dicts, 0, NaN, none and undefined are false.
bool truthy(const Value& value);

// What {{ value }} prints (RuntimeValue.toString): floats with ".0" when whole, containers as
// JSON, booleans as "true"/"false". None and undefined print nothing at the top level; the
// caller skips them.
std::string to_output(const Value& value);
// What `~` and string `+` make of an operand (JavaScript's String(value.value)): floats without
// ".0", lists joined by ",", dicts as "[object Map]".
std::string to_js_string(const Value& value);

struct JsonOptions {
  double indent = 0;  // 0: one line
  bool ensure_ascii = false;
  std::optional<std::pair<std::string, std::string>> separators;  // item, key
};
// The tojson filter and containers' printing (undefined_as_null false prints "undefined").
std::string to_json(const Value& value, const JsonOptions& options, bool undefined_as_null);

// JavaScript's == on the values (loose: "1" == 1, none == undefined), and === (lists and dicts
// by identity).
bool loose_equals(const Value& a, const Value& b);
bool strict_equals(const Value& a, const Value& b);
// The sort order of the sort and dictsort filters: numbers (and booleans) with numbers, strings
// with strings (lower-cased unless case_sensitive), none with none; anything else throws.
int compare_values(const Value& a, const Value& b, bool case_sensitive);

// The value transformers.js makes of a JSON input (JSON.parse, then the runtime's conversion):
// whole numbers are integers, a dict's integer-like keys come first in numeric order.
Value from_json(const nlohmann::json& json);
// The same of an ordered_json, whose objects keep their keys in the order they were read (a
// std::map-backed nlohmann::json has them in byte order).
Value from_json(const nlohmann::ordered_json& json);

}  // namespace strata::models::chat::jinja
