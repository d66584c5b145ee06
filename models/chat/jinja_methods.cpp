// Member access, the string and dict methods, slicing and the global functions, as
// @huggingface/jinja's runtime defines them (its StringValue and ObjectValue builtins,
// evaluateMemberExpression, utils.slice, range and namespace).
#include <array>
#include <cmath>
#include <ctime>

#include "models/chat/jinja_builtins.h"
#include "models/chat/jinja_text.h"

namespace strata::models::chat::jinja {

namespace {

constexpr std::array<std::pair<std::string_view, Method>, 16> kMethods{{
    {"capitalize", Method::capitalize},
    {"dictsort", Method::dictsort},
    {"endswith", Method::endswith},
    {"get", Method::get},
    {"items", Method::items},
    {"keys", Method::keys},
    {"lower", Method::lower},
    {"lstrip", Method::lstrip},
    {"replace", Method::replace},
    {"rstrip", Method::rstrip},
    {"split", Method::split},
    {"startswith", Method::startswith},
    {"strip", Method::strip},
    {"title", Method::title},
    {"upper", Method::upper},
    {"values", Method::values},
}};

constexpr std::array<std::pair<std::string_view, Function>, 4> kFunctions{{
    {"namespace", Function::namespace_},
    {"raise_exception", Function::raise_exception},
    {"range", Function::range},
    {"strftime_now", Function::strftime_now},
}};

// A range longer than this is refused: a template has no use for one, and it would take memory.
constexpr double kRangeLengthMax = 1e7;

bool is_dict_method(Method method) {
  return method == Method::get || method == Method::items || method == Method::keys ||
         method == Method::values || method == Method::dictsort;
}

Value bound(Method method, const Value& self) {
  auto callable = std::make_shared<Callable>();
  callable->type = Callable::Type::method;
  callable->method = method;
  callable->self = self;
  return Value::function(std::move(callable));
}

// startswith/endswith: a string or a list of strings, any of which matches.
bool affix_matches(const std::string& text, const std::vector<Value>& args, bool start) {
  const char* name = start ? "startswith()" : "endswith()";
  if (args.empty()) throw EvalError(std::string(name) + " requires at least one argument");
  const auto matches = [&](const std::string& affix) {
    return start ? text.starts_with(affix) : text.ends_with(affix);
  };
  const Value& pattern = args[0];
  if (pattern.kind == Kind::string) return matches(pattern.str());
  if (!pattern.is_list()) {
    throw EvalError(std::string(name) + " argument must be a string or tuple of strings");
  }
  for (const Value& item : pattern.items()) {
    if (item.kind != Kind::string)
      throw EvalError(std::string(name) + " tuple elements must be strings");
    if (matches(item.str())) return true;
  }
  return false;
}

Value strings(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& part : parts)
    items.push_back(Value::string(std::move(part)));
  return Value::list(std::move(items));
}

// Python's str.split(None, maxsplit): runs of white space separate, none at either end.
Value split_on_space(std::string_view text, double maxsplit) {
  const std::string_view rest = trim_start(text);
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (at < rest.size()) {
    const std::size_t start = at + leading_space_bytes(rest.substr(at));
    if (start == rest.size()) break;
    std::size_t end = start;
    while (end < rest.size()) {
      std::size_t next = end;
      if (is_js_space(decode_utf8(rest, next))) break;
      end = next;
    }
    if (maxsplit != -1 && static_cast<double>(parts.size()) >= maxsplit) {
      parts.emplace_back(rest.substr(start));
      break;
    }
    parts.emplace_back(rest.substr(start, end - start));
    at = end;
  }
  return strings(std::move(parts));
}

// String.prototype.split(separator), then Python's maxsplit as the reference applies it (with
// Array.prototype.splice, so a negative maxsplit joins the last pieces).
Value split_on(std::string_view text, std::string_view separator, double maxsplit) {
  if (separator.empty()) throw EvalError("empty separator");
  std::vector<std::string> parts;
  for (std::size_t at = 0;;) {
    const std::size_t found = text.find(separator, at);
    parts.emplace_back(text.substr(at, found == std::string_view::npos ? found : found - at));
    if (found == std::string_view::npos) break;
    at = found + separator.size();
  }
  const auto count = static_cast<double>(parts.size());
  if (maxsplit != -1 && count > maxsplit) {
    const double start = maxsplit < 0 ? std::max(count + maxsplit, 0.0) : std::min(maxsplit, count);
    const auto keep = static_cast<std::size_t>(start);
    std::string tail;
    for (std::size_t i = keep; i < parts.size(); ++i)
      tail += (i == keep ? "" : std::string(separator)) + parts[i];
    parts.resize(keep);
    parts.push_back(std::move(tail));
  }
  return strings(std::move(parts));
}

Value split_method(const std::string& text, const std::vector<Value>& args) {
  const Value separator = args.empty() ? Value::none() : args[0];
  if (separator.kind != Kind::string && separator.kind != Kind::none) {
    throw EvalError("sep argument must be a string or null");
  }
  const Value maxsplit = args.size() > 1 ? args[1] : Value::integer(-1);
  if (maxsplit.kind != Kind::integer) throw EvalError("maxsplit argument must be a number");
  if (separator.kind == Kind::none) return split_on_space(text, maxsplit.number);
  return split_on(text, separator.str(), maxsplit.number);
}

Value replace_method(const std::string& text, const std::vector<Value>& args) {
  if (args.size() < 2) throw EvalError("replace() requires at least two arguments");
  if (args[0].kind != Kind::string || args[1].kind != Kind::string) {
    throw EvalError("replace() arguments must be strings");
  }
  Value count = Value::none();
  if (args.size() > 2) {
    const Value* given = args[2].kind == Kind::kwargs ? args[2].map().find("count") : &args[2];
    if (given != nullptr) count = *given;
  }
  if (count.kind != Kind::integer && count.kind != Kind::none) {
    throw EvalError("replace() count argument must be a number or null");
  }
  const double limit = count.kind == Kind::none ? -1 : count.number;
  return Value::string(js_replace(text, args[0].str(), args[1].str(), limit));
}

Value string_method(Method method, const std::string& text, const std::vector<Value>& args) {
  switch (method) {
    case Method::upper:
      return Value::string(js_upper(text));
    case Method::lower:
      return Value::string(js_lower(text));
    // The reference's strip, lstrip and rstrip ignore their argument and take white space.
    case Method::strip:
      return Value::string(std::string(trim(text)));
    case Method::lstrip:
      return Value::string(std::string(trim_start(text)));
    case Method::rstrip:
      return Value::string(std::string(trim_end(text)));
    case Method::title:
      return Value::string(js_title(text));
    case Method::capitalize:
      return Value::string(js_capitalize(text));
    case Method::startswith:
      return Value::boolean(affix_matches(text, args, true));
    case Method::endswith:
      return Value::boolean(affix_matches(text, args, false));
    case Method::split:
      return split_method(text, args);
    case Method::replace:
      return replace_method(text, args);
    default:
      throw EvalError("a string has no such method");
  }
}

Value dictsort(const Dict& dict, const std::vector<Value>& args) {
  std::vector<Value> positional;
  const Value* kwargs = nullptr;
  for (const Value& arg : args) {
    if (arg.kind == Kind::kwargs) {
      kwargs = &arg;
    } else {
      positional.push_back(arg);
    }
  }
  const auto option = [&](std::size_t index, std::string_view key, Value fallback) {
    if (index < positional.size()) return positional[index];
    const Value* given = kwargs != nullptr ? kwargs->map().find(key) : nullptr;
    return given != nullptr ? *given : fallback;
  };
  const Value case_sensitive = option(0, "case_sensitive", Value::boolean(false));
  if (case_sensitive.kind != Kind::boolean) throw EvalError("case_sensitive must be a boolean");
  const Value by = option(1, "by", Value::string("key"));
  if (by.kind != Kind::string) throw EvalError("by must be a string");
  if (by.str() != "key" && by.str() != "value")
    throw EvalError("by must be either 'key' or 'value'");
  const Value reverse = option(2, "reverse", Value::boolean(false));
  if (reverse.kind != Kind::boolean) throw EvalError("reverse must be a boolean");
  std::vector<Value> items;
  for (const auto& [key, value] : dict.entries)
    items.push_back(Value::list({Value::string(key), value}));
  const std::size_t index = by.str() == "key" ? 0 : 1;
  // Indices are sorted, not the values (see sorted() in jinja_filters.cpp).
  std::vector<std::size_t> order(items.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const int sign = compare_values(items[a].items()[index], items[b].items()[index],
                                    case_sensitive.number != 0);
    return reverse.number != 0 ? sign > 0 : sign < 0;
  });
  std::vector<Value> result;
  result.reserve(items.size());
  for (const std::size_t i : order)
    result.push_back(items[i]);
  return Value::list(std::move(result));
}

Value dict_method(Method method, const Dict& dict, const std::vector<Value>& args) {
  switch (method) {
    case Method::get: {
      if (args.empty() || args[0].kind != Kind::string) {
        throw EvalError(std::string("Object key must be a string: got ") +
                        (args.empty() ? "undefined" : type_name(args[0].kind)));
      }
      if (const Value* found = dict.find(args[0].str())) return *found;
      return args.size() > 1 ? args[1] : Value::none();
    }
    case Method::items: {
      std::vector<Value> items;
      for (const auto& [key, value] : dict.entries)
        items.push_back(Value::list({Value::string(key), value}));
      return Value::list(std::move(items));
    }
    case Method::keys: {
      std::vector<Value> keys;
      for (const auto& entry : dict.entries)
        keys.push_back(Value::string(entry.first));
      return Value::list(std::move(keys));
    }
    case Method::values: {
      std::vector<Value> values;
      for (const auto& entry : dict.entries)
        values.push_back(entry.second);
      return Value::list(std::move(values));
    }
    case Method::dictsort:
      return dictsort(dict, args);
    default:
      throw EvalError("a dict has no such method");
  }
}

Value range_function(const Args& args) {
  if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
    throw EvalError("range() takes one to three numbers");
  }
  for (const Value& arg : args.positional) {
    if (!arg.is_number()) throw EvalError("range() takes numbers");
  }
  double start = args.positional[0].number;
  double stop = 0;
  if (args.positional.size() == 1) {
    std::swap(start, stop);
  } else {
    stop = args.positional[1].number;
  }
  const double step = args.positional.size() > 2 ? args.positional[2].number : 1;
  if (step == 0) throw EvalError("range() step must not be zero");
  if ((stop - start) / step > kRangeLengthMax) throw EvalError("range() is longer than 10 million");
  std::vector<Value> items;
  for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
    items.push_back(i == std::floor(i) ? Value::integer(i) : Value::floating(i));
  }
  return Value::list(std::move(items));
}

// A namespace's entry from a [key, value] pair, or a string of two characters.
std::pair<std::string, Value> namespace_entry(const Value& pair) {
  std::vector<Value> values;
  if (pair.is_list()) values = pair.items();
  if (pair.kind == Kind::string) {
    for (const auto point : code_points(pair.str()))
      values.push_back(Value::string(std::string(point)));
  }
  if (values.size() != 2) {
    throw EvalError("namespace expected an object or an iterable of [key, value] pairs");
  }
  if (values[0].kind != Kind::string) throw EvalError("namespace keys must be strings");
  return {values[0].str(), values[1]};
}

Value namespace_function(const Args& args) {
  if (args.positional.size() > 1) {
    throw EvalError("namespace expected at most 1 argument, got " +
                    std::to_string(args.positional.size()));
  }
  Value space = Value::dict(Kind::name_space);
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_object()) {
      for (const auto& [key, value] : source.map().entries)
        space.map().set(key, value);
    } else if (source.is_list()) {
      for (const Value& pair : source.items()) {
        auto [key, value] = namespace_entry(pair);
        space.map().set(std::move(key), std::move(value));
      }
    } else {
      throw EvalError(std::string("'") + type_name(source.kind) + "' object is not iterable");
    }
  }
  for (const auto& [key, value] : args.keyword)
    space.map().set(key, value);
  return space;
}

// The reference's strftime: %Y %m %d %b %B %H %M and %%, in English; any other directive stays
// as written.
Value strftime_function(const Args& args) {
  if (args.positional.empty() || args.positional[0].kind != Kind::string) {
    throw EvalError("strftime_now() takes a format string");
  }
  static constexpr std::array<const char*, 12> kMonths{
      "January", "February", "March",     "April",   "May",      "June",
      "July",    "August",   "September", "October", "November", "December"};
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  const auto two = [](int n) { return (n < 10 ? "0" : "") + std::to_string(n); };
  const std::string& format = args.positional[0].str();
  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    const char next = i + 1 < format.size() ? format[i + 1] : '\0';
    std::string piece;
    switch (format[i] == '%' ? next : '\0') {
      case 'Y':
        piece = std::to_string(local.tm_year + 1900);
        break;
      case 'm':
        piece = two(local.tm_mon + 1);
        break;
      case 'd':
        piece = two(local.tm_mday);
        break;
      case 'b':
        piece = std::string(kMonths[static_cast<std::size_t>(local.tm_mon)]).substr(0, 3);
        break;
      case 'B':
        piece = kMonths[static_cast<std::size_t>(local.tm_mon)];
        break;
      case 'H':
        piece = two(local.tm_hour);
        break;
      case 'M':
        piece = two(local.tm_min);
        break;
      case '%':
        piece = "%";
        break;
      default:
        out += format[i];
        continue;
    }
    out += piece;
    ++i;
  }
  return Value::string(std::move(out));
}

// utils.slice: Python's slice, except that an explicit stop of -1 with a negative step runs to
// the start, as the reference has it.
std::vector<std::size_t> slice_indices(std::size_t size, const Value& start_value,
                                       const Value& stop_value, const Value& step_value) {
  const auto length = static_cast<double>(size);
  const double step = step_value.kind == Kind::undefined ? 1 : step_value.number;
  const bool has_start = start_value.kind != Kind::undefined;
  const bool has_stop = stop_value.kind != Kind::undefined;
  double start = 0;
  double stop = 0;
  const double direction = step > 0 ? 1 : step < 0 ? -1 : 0;
  if (direction >= 0) {
    start = has_start ? start_value.number : 0;
    start = start < 0 ? std::max(length + start, 0.0) : std::min(start, length);
    stop = has_stop ? stop_value.number : length;
    stop = stop < 0 ? std::max(length + stop, 0.0) : std::min(stop, length);
  } else {
    start = has_start ? start_value.number : length - 1;
    start = start < 0 ? std::max(length + start, -1.0) : std::min(start, length - 1);
    stop = has_stop ? stop_value.number : -1;
    stop = stop < -1 ? std::max(length + stop, -1.0) : std::min(stop, length - 1);
  }
  std::vector<std::size_t> indices;
  for (double i = start; direction * i < direction * stop; i += step) {
    indices.push_back(static_cast<std::size_t>(i));
  }
  return indices;
}

}  // namespace

const Value* Args::find(std::string_view keyword_name) const {
  for (const auto& [key, value] : keyword) {
    if (key == keyword_name) return &value;
  }
  return nullptr;
}

std::vector<Value> Args::flattened() const {
  std::vector<Value> all = positional;
  if (!keyword.empty()) {
    Value kwargs = Value::dict(Kind::kwargs);
    for (const auto& [key, value] : keyword)
      kwargs.map().set(key, value);
    all.push_back(std::move(kwargs));
  }
  return all;
}

std::optional<Method> find_method(std::string_view name) {
  for (const auto& [known, method] : kMethods) {
    if (known == name) return method;
  }
  return std::nullopt;
}

std::optional<Function> find_function(std::string_view name) {
  for (const auto& [known, function] : kFunctions) {
    if (known == name) return function;
  }
  return std::nullopt;
}

std::optional<Method> member_method(const Value& object, std::string_view name) {
  const auto method = find_method(name);
  if (!method) return std::nullopt;
  if (object.is_object() && is_dict_method(*method)) return method;
  if (object.kind == Kind::string && !is_dict_method(*method)) return method;
  return std::nullopt;
}

Value get_member(const Value& object, const Value& property) {
  const bool indexable = object.is_list() || object.kind == Kind::string;
  if (!indexable || property.kind != Kind::integer) {
    if (property.kind != Kind::string) {
      throw EvalError(std::string("Cannot access property with non-string") +
                      (indexable ? "/non-number" : "") + ": got " + type_name(property.kind));
    }
  }
  if (object.is_mapping()) {
    if (const Value* found = object.map().find(property.str())) return *found;
  }
  if (indexable && property.kind == Kind::integer) {
    if (object.kind == Kind::string) {
      auto character = utf16_at(object.str(), property.number);
      return character ? Value::string(std::move(*character)) : Value{};
    }
    const auto size = static_cast<double>(object.items().size());
    const double index = property.number < 0 ? property.number + size : property.number;
    return index >= 0 && index < size ? object.items()[static_cast<std::size_t>(index)] : Value{};
  }
  if (indexable && property.str() == "length") {
    return Value::integer(static_cast<double>(
        object.kind == Kind::string ? utf16_length(object.str()) : object.items().size()));
  }
  if (const auto method = member_method(object, property.str())) return bound(*method, object);
  return {};
}

Value call_method(Method method, const Value& self, const std::vector<Value>& args) {
  if (self.kind == Kind::string) return string_method(method, self.str(), args);
  return dict_method(method, self.map(), args);
}

Value call_function(Function function, const Args& args) {
  switch (function) {
    case Function::range:
      return range_function(args);
    case Function::namespace_:
      return namespace_function(args);
    case Function::strftime_now:
      return strftime_function(args);
    default:
      throw EvalError("raise_exception is called by the renderer");
  }
}

Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (!object.is_list() && object.kind != Kind::string) {
    throw EvalError("Slice object must be an array or string");
  }
  for (const Value* part : {&start, &stop, &step}) {
    if (part->kind != Kind::integer && part->kind != Kind::undefined) {
      throw EvalError("Slice start, stop and step must be integers or left out");
    }
  }
  if (object.is_list()) {
    std::vector<Value> items;
    for (const std::size_t i : slice_indices(object.items().size(), start, stop, step)) {
      items.push_back(object.items()[i]);
    }
    return Value::list(std::move(items));
  }
  const auto points = code_points(object.str());
  std::string out;
  for (const std::size_t i : slice_indices(points.size(), start, stop, step))
    out += points[i];
  return Value::string(std::move(out));
}

}  // namespace strata::models::chat::jinja
