// The filters, dispatched as @huggingface/jinja's applyFilter dispatches them: on whether the
// filter was called with parentheses, then on the operand's type. What the reference refuses
// for a type is refused here with its words; the names it refuses for every type are the
// extensions jinja_builtins.h lists.
#include <algorithm>
#include <array>
#include <cmath>

#include "models/chat/jinja_builtins.h"
#include "models/chat/jinja_text.h"

namespace strata::models::chat::jinja {

namespace {

constexpr std::array<std::pair<std::string_view, Filter>, 33> kFilters{{
    {"abs", Filter::abs},
    {"capitalize", Filter::capitalize},
    {"count", Filter::count},
    {"d", Filter::d},
    {"default", Filter::default_},
    {"dictsort", Filter::dictsort},
    {"e", Filter::e},
    {"escape", Filter::escape},
    {"first", Filter::first},
    {"float", Filter::float_},
    {"indent", Filter::indent},
    {"int", Filter::int_},
    {"items", Filter::items},
    {"join", Filter::join},
    {"last", Filter::last},
    {"length", Filter::length},
    {"list", Filter::list},
    {"lower", Filter::lower},
    {"map", Filter::map},
    {"reject", Filter::reject},
    {"rejectattr", Filter::rejectattr},
    {"replace", Filter::replace},
    {"reverse", Filter::reverse},
    {"safe", Filter::safe},
    {"select", Filter::select},
    {"selectattr", Filter::selectattr},
    {"sort", Filter::sort},
    {"string", Filter::string},
    {"title", Filter::title},
    {"tojson", Filter::tojson},
    {"trim", Filter::trim},
    {"unique", Filter::unique},
    {"upper", Filter::upper},
}};

std::string_view filter_name(Filter filter) {
  for (const auto& [name, value] : kFilters) {
    if (value == filter) return name;
  }
  return "?";
}

[[noreturn]] void unknown(const char* type, Filter filter) {
  throw EvalError(std::string("Unknown ") + type + " filter: " + std::string(filter_name(filter)));
}

[[noreturn]] void cannot_apply(Filter filter, const Value& operand) {
  throw EvalError("Cannot apply filter \"" + std::string(filter_name(filter)) +
                  "\" to type: " + type_name(operand.kind));
}

const Value* argument(const Args& args, std::size_t index, std::string_view keyword) {
  if (index < args.positional.size()) return &args.positional[index];
  return args.find(keyword);
}

bool flag(const Args& args, std::size_t index, std::string_view keyword, const char* what) {
  const Value* value = argument(args, index, keyword);
  if (value == nullptr) return false;
  if (value->kind != Kind::boolean) throw EvalError(std::string(what) + " must be a boolean");
  return value->number != 0;
}

Value items_of(const Dict& dict) {
  std::vector<Value> items;
  for (const auto& [key, value] : dict.entries) {
    items.push_back(Value::list({Value::string(key), value}));
  }
  return Value::list(std::move(items));
}

Value length_of(const Value& operand) {
  if (operand.kind == Kind::string) {
    return Value::integer(static_cast<double>(utf16_length(operand.str())));
  }
  if (operand.is_list()) return Value::integer(static_cast<double>(operand.items().size()));
  return Value::integer(static_cast<double>(operand.map().entries.size()));
}

std::string html_escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Array.prototype.join of the values: none and undefined join as "".
std::string join_values(const std::vector<Value>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += to_js_string(items[i]);
  }
  return out;
}

std::string indent_lines(std::string_view text, std::size_t width, bool first, bool blank) {
  std::string out;
  const std::string pad(width, ' ');
  std::size_t start = 0;
  for (std::size_t line = 0;; ++line) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view piece = text.substr(start, end - start);
    if (line > 0) out += '\n';
    if (!((!first && line == 0) || (!blank && piece.empty()))) out += pad;
    out += piece;
    if (end == text.size()) break;
    start = end + 1;
  }
  return out;
}

// The sort order of a stable sort: JavaScript's Array.prototype.sort is stable.
Value sorted(const Value& operand, bool reverse, bool case_sensitive, const Value* attribute);

// The `select`/`reject` extension and selectattr/rejectattr: items whose test passes (select).
Value select_items(const Value& operand, const Args& args, bool select, bool by_attribute);

Value map_attribute(const Value& operand, const Args& args);

Value plain_list_filter(Filter filter, const Value& operand) {
  const std::vector<Value>& items = operand.items();
  switch (filter) {
    case Filter::list:
      return operand;
    case Filter::first:
      return items.empty() ? Value{} : items.front();
    case Filter::last:
      return items.empty() ? Value{} : items.back();
    case Filter::count:
    case Filter::length:
      return length_of(operand);
    case Filter::reverse:
      return Value::list({items.rbegin(), items.rend()});
    case Filter::sort:
      return sorted(operand, false, false, nullptr);
    case Filter::join:
      return Value::string(join_values(items, ""));
    case Filter::string:
      return Value::string(to_json(operand, {}, false));
    case Filter::unique: {
      std::vector<Value> kept;
      for (const Value& item : items) {
        const auto same = [&](const Value& seen) {
          return strict_equals(seen, item) || (item.is_number() && seen.is_number() &&
                                               std::isnan(item.number) && std::isnan(seen.number));
        };
        if (std::none_of(kept.begin(), kept.end(), same)) kept.push_back(item);
      }
      return Value::list(std::move(kept));
    }
    case Filter::select:
    case Filter::reject:
      return select_items(operand, {}, filter == Filter::select, false);
    case Filter::d:
    case Filter::default_:
      return operand;
    default:
      unknown("ArrayValue", filter);
  }
}

Value plain_string_filter(Filter filter, const Value& operand) {
  const std::string& text = operand.str();
  switch (filter) {
    case Filter::count:
    case Filter::length:
      return length_of(operand);
    case Filter::upper:
      return Value::string(js_upper(text));
    case Filter::lower:
      return Value::string(js_lower(text));
    case Filter::title:
      return Value::string(js_title(text));
    case Filter::capitalize:
      return Value::string(js_capitalize(text));
    case Filter::trim:
      return Value::string(std::string(trim(text)));
    case Filter::indent:
      return Value::string(indent_lines(text, 4, false, false));
    case Filter::join:
    case Filter::string:
    case Filter::d:
    case Filter::default_:
      return operand;
    case Filter::int_:
      return Value::integer(js_parse_int(text).value_or(0));
    case Filter::float_:
      return Value::floating(js_parse_float(text).value_or(0));
    case Filter::e:
    case Filter::escape:
      return Value::string(html_escape(text));
    default:
      unknown("StringValue", filter);
  }
}

Value plain_scalar_filter(Filter filter, const Value& operand) {
  if (filter == Filter::d || filter == Filter::default_) return operand;
  if (operand.is_number()) {
    switch (filter) {
      case Filter::abs:
        return Value{operand.kind, std::fabs(operand.number), {}};
      case Filter::int_:
        return Value::integer(std::floor(operand.number));
      case Filter::float_:
        return Value::floating(operand.number);
      case Filter::string:
        return Value::string(to_output(operand));
      default:
        unknown("NumericValue", filter);
    }
  }
  switch (filter) {
    case Filter::int_:
      return Value::integer(operand.number);
    case Filter::float_:
      return Value::floating(operand.number);
    case Filter::string:
      return Value::string(operand.number != 0 ? "true" : "false");
    default:
      unknown("BooleanValue", filter);
  }
}

Value plain_filter(Filter filter, const Value& operand) {
  if (filter == Filter::safe) return operand;
  if (filter == Filter::tojson) return Value::string(to_json(operand, {}, true));
  if (operand.is_list()) return plain_list_filter(filter, operand);
  if (operand.kind == Kind::string) return plain_string_filter(filter, operand);
  if (operand.is_number() || operand.kind == Kind::boolean) {
    return plain_scalar_filter(filter, operand);
  }
  if (operand.is_object()) {
    switch (filter) {
      case Filter::items:
        return items_of(operand.map());
      case Filter::count:
      case Filter::length:
        return length_of(operand);
      case Filter::dictsort:
        return call_method(Method::dictsort, operand, {});
      case Filter::d:
      case Filter::default_:
        return operand;
      default:
        unknown("ObjectValue", filter);
    }
  }
  // Python's default() with no argument: undefined becomes "", anything else stays.
  if (filter == Filter::d || filter == Filter::default_) {
    return operand.kind == Kind::undefined ? Value::string("") : operand;
  }
  cannot_apply(filter, operand);
}

Value tojson_called(const Value& operand, const Args& args) {
  JsonOptions options;
  if (const Value* indent = args.find("indent"); indent != nullptr && indent->kind != Kind::none) {
    if (indent->kind != Kind::integer) throw EvalError("If set, indent must be a number");
    options.indent = indent->number;
  }
  if (const Value* ascii = args.find("ensure_ascii")) {
    if (ascii->kind != Kind::boolean) throw EvalError("If set, ensure_ascii must be a boolean");
    options.ensure_ascii = ascii->number != 0;
  }
  if (const Value* sort_keys = args.find("sort_keys")) {
    if (sort_keys->kind != Kind::boolean) throw EvalError("If set, sort_keys must be a boolean");
    // The reference orders keys by localeCompare (ICU collation), which strata does not have.
    if (sort_keys->number != 0) throw EvalError("tojson(sort_keys=true) is not supported");
  }
  if (const Value* separators = args.find("separators");
      separators != nullptr && separators->kind != Kind::none) {
    const bool pair = separators->is_list() && separators->items().size() == 2 &&
                      separators->items()[0].kind == Kind::string &&
                      separators->items()[1].kind == Kind::string;
    if (!pair) throw EvalError("separators must be a tuple of two strings");
    options.separators = {separators->items()[0].str(), separators->items()[1].str()};
  }
  return Value::string(to_json(operand, options, true));
}

Value join_called(const Value& operand, const Args& args) {
  const Value* separator = argument(args, 0, "separator");
  if (separator != nullptr && separator->kind != Kind::string) {
    throw EvalError("separator must be a string");
  }
  const std::string_view glue = separator != nullptr ? std::string_view(separator->str()) : "";
  if (operand.is_list()) return Value::string(join_values(operand.items(), glue));
  std::string out;
  const auto points = code_points(operand.str());
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (i > 0) out += glue;
    out += points[i];
  }
  return Value::string(std::move(out));
}

Value number_called(Filter filter, const Value& operand, const Args& args) {
  const bool integer = filter == Filter::int_;
  const Value* fallback = argument(args, 0, "default");
  const Value zero = integer ? Value::integer(0) : Value::floating(0);
  if (operand.kind == Kind::string) {
    const auto parsed = integer ? js_parse_int(operand.str()) : js_parse_float(operand.str());
    if (!parsed) return fallback != nullptr ? *fallback : zero;
    return integer ? Value::integer(*parsed) : Value::floating(*parsed);
  }
  if (operand.is_number()) return operand;
  if (operand.kind == Kind::boolean) return Value{zero.kind, operand.number, {}};
  cannot_apply(filter, operand);
}

Value default_called(const Value& operand, const Args& args) {
  const Value fallback = args.positional.empty() ? Value::string("") : args.positional[0];
  const Value* boolean = argument(args, 1, "boolean");
  if (boolean != nullptr && boolean->kind != Kind::boolean) {
    throw EvalError("`default` filter flag must be a boolean");
  }
  const bool when_false = boolean != nullptr && boolean->number != 0;
  if (operand.kind == Kind::undefined || (when_false && !truthy(operand))) return fallback;
  return operand;
}

Value called_list_filter(Filter filter, const Value& operand, const Args& args) {
  switch (filter) {
    case Filter::sort: {
      const Value* attribute = argument(args, 2, "attribute");
      if (attribute != nullptr && attribute->kind != Kind::string &&
          attribute->kind != Kind::integer && attribute->kind != Kind::none) {
        throw EvalError("attribute must be a string, integer, or null");
      }
      if (attribute != nullptr && attribute->kind == Kind::none) attribute = nullptr;
      return sorted(operand, flag(args, 0, "reverse", "reverse"),
                    flag(args, 1, "case_sensitive", "case_sensitive"), attribute);
    }
    case Filter::selectattr:
    case Filter::rejectattr:
      return select_items(operand, args, filter == Filter::selectattr, true);
    case Filter::select:
    case Filter::reject:
      return select_items(operand, args, filter == Filter::select, false);
    case Filter::map:
      return map_attribute(operand, args);
    case Filter::count:
      return length_of(operand);
    default:
      unknown("ArrayValue", filter);
  }
}

Value called_string_filter(Filter filter, const Value& operand, const Args& args) {
  if (filter == Filter::indent) {
    const Value* width = argument(args, 0, "width");
    if (width != nullptr && width->kind != Kind::integer) throw EvalError("width must be a number");
    const double columns = width != nullptr ? width->number : 4;
    if (columns < 0) throw EvalError("Invalid count value: " + js_number(columns));
    const Value* first = argument(args, 1, "first");
    const Value* blank = argument(args, 2, "blank");
    // The reference reads these flags as JavaScript values: a list or dict is true.
    const auto on = [](const Value* v) {
      return v != nullptr && (truthy(*v) || v->is_mapping() || v->is_list());
    };
    return Value::string(
        indent_lines(operand.str(), static_cast<std::size_t>(columns), on(first), on(blank)));
  }
  if (filter == Filter::replace) {
    std::vector<Value> flat = args.positional;
    Value kwargs = Value::dict(Kind::kwargs);
    for (const auto& [key, value] : args.keyword)
      kwargs.map().set(key, value);
    flat.push_back(kwargs);
    return call_method(Method::replace, operand, flat);
  }
  if (filter == Filter::count) return length_of(operand);
  unknown("StringValue", filter);
}

Value called_filter(Filter filter, const Value& operand, const Args& args) {
  switch (filter) {
    case Filter::tojson:
      return tojson_called(operand, args);
    case Filter::join:
      if (!operand.is_list() && operand.kind != Kind::string) cannot_apply(filter, operand);
      return join_called(operand, args);
    case Filter::int_:
    case Filter::float_:
      return number_called(filter, operand, args);
    case Filter::d:
    case Filter::default_:
      return default_called(operand, args);
    default:
      break;
  }
  if (operand.is_list()) return called_list_filter(filter, operand, args);
  if (operand.kind == Kind::string) return called_string_filter(filter, operand, args);
  if (operand.is_object()) {
    if (filter == Filter::dictsort) return call_method(Method::dictsort, operand, args.flattened());
    if (filter == Filter::items) return items_of(operand.map());
    if (filter == Filter::count) return length_of(operand);
    unknown("ObjectValue", filter);
  }
  cannot_apply(filter, operand);
}

// getAttributeValue: a dotted path through dicts and (by index) lists.
Value attribute_path(const Value& item, std::string_view path) {
  Value value = item;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = std::min(path.find('.', start), path.size());
    const std::string_view part = path.substr(start, dot - start);
    if (value.is_mapping()) {
      const Value* found = value.map().find(part);
      value = found != nullptr ? *found : Value{};
    } else if (value.is_list()) {
      const auto index = js_parse_int(part);
      if (!index || *index < 0 || *index >= static_cast<double>(value.items().size())) return {};
      value = value.items()[static_cast<std::size_t>(*index)];
    } else {
      return {};
    }
    if (dot == path.size()) return value;
    start = dot + 1;
  }
}

Value sorted(const Value& operand, bool reverse, bool case_sensitive, const Value* attribute) {
  std::vector<Value> items = operand.items();
  const std::string path = attribute == nullptr               ? ""
                           : attribute->kind == Kind::integer ? js_number(attribute->number)
                                                              : attribute->str();
  const auto key = [&](const Value& item) {
    return attribute == nullptr ? item : attribute_path(item, path);
  };
  // Indices are sorted, not the values: moving variants of shared_ptrs through the sort's
  // rotations trips GCC 12's -Wmaybe-uninitialized at -O3.
  std::vector<std::size_t> order(items.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const int by = compare_values(key(items[a]), key(items[b]), case_sensitive);
    return reverse ? by > 0 : by < 0;
  });
  std::vector<Value> result;
  result.reserve(items.size());
  for (const std::size_t i : order)
    result.push_back(items[i]);
  return Value::list(std::move(result));
}

Value select_items(const Value& operand, const Args& args, bool select, bool by_attribute) {
  const std::size_t test_at = by_attribute ? 1 : 0;
  std::optional<Test> test;
  for (std::size_t i = 0; i < std::min(args.positional.size(), test_at + 1); ++i) {
    if (args.positional[i].kind != Kind::string) {
      throw EvalError("the attribute and test names of a select filter must be strings");
    }
  }
  if (by_attribute && args.positional.empty()) throw EvalError("`selectattr` needs an attribute");
  if (args.positional.size() > test_at) {
    test = find_test(args.positional[test_at].str());
    if (!test) throw EvalError("Unknown test: " + args.positional[test_at].str());
  }
  const Value* compared =
      args.positional.size() > test_at + 1 ? &args.positional[test_at + 1] : nullptr;
  std::vector<Value> kept;
  for (const Value& item : operand.items()) {
    const Value* subject = &item;
    if (by_attribute) {
      if (!item.is_mapping())
        throw EvalError("`selectattr` can only be applied to array of objects");
      subject = item.map().find(args.positional[0].str());
    }
    const bool passed =
        subject != nullptr && (test ? apply_test(*test, *subject, compared) : truthy(*subject));
    if (passed == select) kept.push_back(item);
  }
  return Value::list(std::move(kept));
}

Value map_attribute(const Value& operand, const Args& args) {
  const Value* attribute = args.find("attribute");
  if (attribute == nullptr) {
    throw EvalError("`map` expressions without `attribute` set are not currently supported.");
  }
  if (attribute->kind != Kind::string) throw EvalError("attribute must be a string");
  const Value* fallback = args.find("default");
  std::vector<Value> mapped;
  for (const Value& item : operand.items()) {
    if (!item.is_mapping()) throw EvalError("items in map must be an object");
    Value value = attribute_path(item, attribute->str());
    mapped.push_back(value.kind == Kind::undefined && fallback != nullptr ? *fallback : value);
  }
  return Value::list(std::move(mapped));
}

}  // namespace

std::optional<Filter> find_filter(std::string_view name) {
  for (const auto& [known, filter] : kFilters) {
    if (known == name) return filter;
  }
  return std::nullopt;
}

Value apply_filter(Filter filter, bool called, const Value& operand, const Args& args) {
  return called ? called_filter(filter, operand, args) : plain_filter(filter, operand);
}

}  // namespace strata::models::chat::jinja
