#include "models/chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "models/chat/jinja_text.h"

namespace strata::models::chat::jinja {

namespace {

// What a value is to JavaScript's equality: its `.value` is one of these.
enum class RawType { undefined, null, boolean, number, string, object };

RawType raw_type(Kind kind) {
  switch (kind) {
    case Kind::undefined:
      return RawType::undefined;
    case Kind::none:
      return RawType::null;
    case Kind::boolean:
      return RawType::boolean;
    case Kind::integer:
    case Kind::floating:
      return RawType::number;
    case Kind::string:
      return RawType::string;
    default:
      return RawType::object;
  }
}

const void* identity(const Value& value) {
  return std::visit(
      [](const auto& pointer) -> const void* {
        if constexpr (std::is_same_v<std::decay_t<decltype(pointer)>, std::monostate>) {
          return nullptr;
        } else {
          return pointer.get();
        }
      },
      value.payload);
}

// ToPrimitive of a list, dict or function compared with a string or number.
std::optional<std::string> object_primitive(const Value& value) {
  if (value.is_list()) return to_js_string(value);
  if (value.is_mapping()) return std::string("[object Map]");
  return std::nullopt;
}

std::string float_output(double number) {
  if (number == 0 && std::signbit(number)) return "-0.0";
  if (std::isfinite(number) && number == std::floor(number) && std::fabs(number) < 1e21) {
    // toFixed(1) of a whole number below 1e21: its exact digits.
    char buffer[64];
    const auto result =
        std::to_chars(buffer, buffer + sizeof buffer, number, std::chars_format::fixed, 0);
    return std::string(buffer, result.ptr) + ".0";
  }
  return js_number(number);
}

bool is_array_index(const std::string& key) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return false;
  if (!std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return std::stoull(key) < 4294967295ULL;
}

std::string container_json(const Value& value, const JsonOptions& options, bool undefined_as_null,
                           int depth);

std::string json_at(const Value& value, const JsonOptions& options, bool undefined_as_null,
                    int depth) {
  switch (value.kind) {
    case Kind::none:
      return "null";
    case Kind::undefined:
      return undefined_as_null ? "null" : "undefined";
    case Kind::boolean:
      return value.number != 0 ? "true" : "false";
    case Kind::integer:
    case Kind::floating:
      return std::isfinite(value.number) ? js_number(value.number) : "null";
    case Kind::string:
      return json_quote(value.str(), options.ensure_ascii);
    // The reference's toJSON knows no tuple: printing one, or its tojson, raises.
    case Kind::tuple:
    case Kind::function:
      throw EvalError(std::string("Cannot convert to JSON: ") + type_name(value.kind));
    default:
      return container_json(value, options, undefined_as_null, depth);
  }
}

std::string container_json(const Value& value, const JsonOptions& options, bool undefined_as_null,
                           int depth) {
  const bool indented = options.indent != 0 && !std::isnan(options.indent);
  if (options.indent < 0) throw EvalError("Invalid count value: " + js_number(options.indent));
  const auto [item_separator, key_separator] =
      options.separators.value_or(indented ? std::pair<std::string, std::string>{",", ": "}
                                           : std::pair<std::string, std::string>{", ", ": "});
  const std::string unit =
      indented ? std::string(static_cast<std::size_t>(options.indent), ' ') : "";
  std::string base = "\n";
  for (int i = 0; i < depth; ++i)
    base += unit;
  const std::string child = base + unit;
  std::vector<std::string> parts;
  if (value.is_list()) {
    for (const Value& item : value.items()) {
      parts.push_back(json_at(item, options, undefined_as_null, depth + 1));
    }
  } else {
    for (const auto& [key, item] : value.map().entries) {
      parts.push_back((indented ? child : "") + json_quote(key, options.ensure_ascii) +
                      key_separator + json_at(item, options, undefined_as_null, depth + 1));
    }
  }
  const char* brackets = value.is_list() ? "[]" : "{}";
  std::string out(1, brackets[0]);
  const std::string separator = item_separator + (indented && value.is_list() ? child : "");
  if (indented && !parts.empty() && value.is_list()) out += child;
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i == 0 ? "" : separator) + parts[i];
  if (indented && !parts.empty()) out += base;
  return out + brackets[1];
}

}  // namespace

Value Value::string(std::string text) {
  return Value{Kind::string, 0, std::make_shared<const std::string>(std::move(text))};
}

Value Value::list(std::vector<Value> items, Kind kind) {
  return Value{kind, 0, std::make_shared<List>(List{std::move(items)})};
}

Value Value::dict(Kind kind) {
  return Value{kind, 0, std::make_shared<Dict>()};
}

Value Value::function(std::shared_ptr<const Callable> callable) {
  return Value{Kind::function, 0, std::move(callable)};
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& entry : entries) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& entry : entries) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const char* type_name(Kind kind) {
  static constexpr const char* kNames[] = {
      "UndefinedValue", "NullValue",    "BooleanValue", "IntegerValue", "FloatValue",
      "StringValue",    "ArrayValue",   "TupleValue",   "ObjectValue",  "KeywordArgumentsValue",
      "NamespaceValue", "FunctionValue"};
  return kNames[static_cast<int>(kind)];
}

bool truthy(const Value& value) {
  switch (value.kind) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
    case Kind::integer:
    case Kind::floating:
      return value.number != 0 && !std::isnan(value.number);
    case Kind::string:
      return !value.str().empty();
    case Kind::list:
    case Kind::tuple:
      return !value.items().empty();
    case Kind::dict:
    case Kind::kwargs:
      return !value.map().entries.empty();
    default:
      return true;  // A namespace (a Map object) and a function are always true.
  }
}

std::string to_output(const Value& value) {
  switch (value.kind) {
    case Kind::undefined:
      return "undefined";
    case Kind::none:
      return "null";
    case Kind::boolean:
      return value.number != 0 ? "true" : "false";
    case Kind::integer:
      return js_number(value.number);
    case Kind::floating:
      return float_output(value.number);
    case Kind::string:
      return value.str();
    case Kind::function:
      throw EvalError("cannot print a function (a macro or a method)");
    default:
      return to_json(value, {}, false);
  }
}

std::string to_js_string(const Value& value) {
  switch (value.kind) {
    case Kind::undefined:
    case Kind::none:
      return "";  // Array.prototype.join's reading; operators refuse them first.
    case Kind::boolean:
      return value.number != 0 ? "true" : "false";
    case Kind::integer:
    case Kind::floating:
      return js_number(value.number);
    case Kind::string:
      return value.str();
    case Kind::list:
    case Kind::tuple: {
      std::string out;
      for (std::size_t i = 0; i < value.items().size(); ++i) {
        if (i > 0) out += ',';
        out += to_output(value.items()[i]);
      }
      return out;
    }
    case Kind::function:
      throw EvalError("cannot make a string of a function");
    default:
      return "[object Map]";
  }
}

std::string to_json(const Value& value, const JsonOptions& options, bool undefined_as_null) {
  return json_at(value, options, undefined_as_null, 0);
}

bool strict_equals(const Value& a, const Value& b) {
  const RawType type = raw_type(a.kind);
  if (type != raw_type(b.kind)) return false;
  switch (type) {
    case RawType::undefined:
    case RawType::null:
      return true;
    case RawType::boolean:
    case RawType::number:
      return a.number == b.number;
    case RawType::string:
      return a.str() == b.str();
    default:
      return identity(a) == identity(b);
  }
}

bool loose_equals(const Value& a, const Value& b) {
  const RawType ta = raw_type(a.kind);
  const RawType tb = raw_type(b.kind);
  if (ta == tb) return strict_equals(a, b);
  const auto nullish = [](RawType t) { return t == RawType::null || t == RawType::undefined; };
  if (nullish(ta) || nullish(tb)) return nullish(ta) && nullish(tb);
  if (ta == RawType::boolean) return loose_equals(Value::integer(a.number), b);
  if (tb == RawType::boolean) return loose_equals(a, Value::integer(b.number));
  if (ta == RawType::number && tb == RawType::string) return a.number == js_to_number(b.str());
  if (ta == RawType::string && tb == RawType::number) return js_to_number(a.str()) == b.number;
  if (ta == RawType::object && tb != RawType::object) {
    const auto primitive = object_primitive(a);
    return primitive && loose_equals(Value::string(*primitive), b);
  }
  if (tb == RawType::object && ta != RawType::object) return loose_equals(b, a);
  return false;
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  const auto fail = [&](const std::string& what) -> int {
    throw EvalError(what + " " + type_name(a.kind) + " and " + type_name(b.kind));
  };
  if (a.kind == Kind::none && b.kind == Kind::none) return 0;
  if (a.kind == Kind::none || b.kind == Kind::none) return fail("Cannot compare");
  if (a.kind == Kind::undefined && b.kind == Kind::undefined) return 0;
  if (a.kind == Kind::undefined || b.kind == Kind::undefined) return fail("Cannot compare");
  const auto numeric = [](const Value& v) { return v.is_number() || v.kind == Kind::boolean; };
  if (numeric(a) && numeric(b)) return a.number < b.number ? -1 : a.number > b.number ? 1 : 0;
  if (a.kind != b.kind) return fail("Cannot compare different types:");
  if (a.kind != Kind::string) return fail("Cannot compare type:");
  if (case_sensitive) return compare_utf16(a.str(), b.str());
  return compare_utf16(js_lower(a.str()), js_lower(b.str()));
}

namespace {

template <typename Json>
Value convert_json(const Json& json) {
  switch (json.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value::boolean(json.template get<bool>());
    case Json::value_t::number_integer:
      return Value::integer(static_cast<double>(json.template get<std::int64_t>()));
    case Json::value_t::number_unsigned:
      return Value::integer(static_cast<double>(json.template get<std::uint64_t>()));
    case Json::value_t::number_float: {
      const double number = json.template get<double>();
      const bool whole = std::isfinite(number) && number == std::floor(number);
      return whole ? Value::integer(number) : Value::floating(number);
    }
    case Json::value_t::string:
      return Value::string(json.template get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json)
        items.push_back(convert_json(item));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      // Object.entries lists integer-like keys first, in numeric order.
      Value dict = Value::dict();
      std::vector<std::pair<double, std::string>> indices;
      for (const auto& [key, item] : json.items()) {
        if (is_array_index(key)) indices.emplace_back(std::stod(key), key);
      }
      std::sort(indices.begin(), indices.end());
      for (const auto& index : indices)
        dict.map().set(index.second, convert_json(json.at(index.second)));
      for (const auto& [key, item] : json.items()) {
        if (!is_array_index(key)) dict.map().set(key, convert_json(item));
      }
      return dict;
    }
    default:
      throw EvalError("a binary JSON value has no template value");
  }
}

}  // namespace

Value from_json(const nlohmann::json& json) {
  return convert_json(json);
}
Value from_json(const nlohmann::ordered_json& json) {
  return convert_json(json);
}

}  // namespace strata::models::chat::jinja
