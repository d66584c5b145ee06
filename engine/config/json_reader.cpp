#include "engine/config/json_reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace strata::engine::detail {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  return text;
}

// Whole-string parse of a double; from_chars accepts "5e8" and refuses "0x10" and "1,5".
std::optional<double> parse_real(std::string_view text) {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  if (text.front() == '+') text.remove_prefix(1);
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value))
    return std::nullopt;
  return value;
}

// 2^63 exactly: doubles at or past it do not fit an int64.
constexpr double two_pow_63 = 9223372036854775808.0;

std::optional<std::int64_t> real_to_int(double value) {
  if (!std::isfinite(value) || value != std::floor(value)) return std::nullopt;
  if (value >= two_pow_63 || value < -two_pow_63) return std::nullopt;
  return static_cast<std::int64_t>(value);
}

std::string describe_int_range(IntRange range) {
  if (range.max == INT64_MAX) return fmt::format("an integer >= {}", range.min);
  return fmt::format("an integer from {} to {}", range.min, range.max);
}

std::string describe_real_range(RealRange range) {
  const char* lower = range.min_exclusive ? ">" : ">=";
  if (range.max >= 1e300) return fmt::format("a number {} {}", lower, range.min);
  if (range.min_exclusive) return fmt::format("a number > {} and <= {}", range.min, range.max);
  return fmt::format("a number from {} to {}", range.min, range.max);
}

}  // namespace

std::string join_path(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return fmt::format("{}.{}", parent, key);
}

std::string show(const nlohmann::json& value) {
  // Replace invalid UTF-8 instead of throwing: the fuzzer feeds arbitrary bytes.
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      std::size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> nearest_key(std::string_view key,
                                       const std::vector<std::string>& candidates) {
  const std::size_t allowed = std::max<std::size_t>(2, key.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = allowed + 1;
  for (const auto& candidate : candidates) {
    std::size_t distance = edit_distance(key, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::optional<std::int64_t> json_to_int(const nlohmann::json& value) {
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<std::int64_t>();
  if (value.is_number_unsigned()) {
    auto number = value.get<std::uint64_t>();
    if (number > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<std::int64_t>(number);
  }
  if (value.is_number_float()) return real_to_int(value.get<double>());
  if (!value.is_string()) return std::nullopt;
  std::string_view text = trim(value.get_ref<const std::string&>());
  std::int64_t exact = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), exact);
  if (error == std::errc{} && end == text.data() + text.size() && !text.empty()) return exact;
  auto real = parse_real(text);
  if (!real) return std::nullopt;
  return real_to_int(*real);
}

std::optional<double> json_to_real(const nlohmann::json& value) {
  if (value.is_number()) {
    double number = value.get<double>();
    if (!std::isfinite(number)) return std::nullopt;
    return number;
  }
  if (value.is_string()) return parse_real(value.get_ref<const std::string&>());
  return std::nullopt;
}

JsonReader::JsonReader(const nlohmann::json* object, std::string path, Diagnostics& diagnostics)
    : path_(std::move(path)), diagnostics_(diagnostics) {
  if (object == nullptr || object->is_null()) return;
  if (!object->is_object()) {
    diagnostics_.errors.push_back(
        fmt::format("{}: got {}, expected an object {{...}}", path_, show(*object)));
    return;
  }
  object_ = object;
}

void JsonReader::alias(std::string_view key, std::string_view alias_key) {
  aliases_.emplace_back(std::string(alias_key), std::string(key));
}

void JsonReader::accept(std::initializer_list<std::string_view> keys) {
  for (auto key : keys)
    find(key);
}

const nlohmann::json* JsonReader::find(std::string_view key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.emplace_back(key);
  if (object_ == nullptr) return nullptr;
  std::vector<std::string> names = {std::string(key)};
  for (const auto& [alias_key, canonical] : aliases_)
    if (canonical == key) names.push_back(alias_key);
  const nlohmann::json* found = nullptr;
  std::string found_name;
  for (const auto& name : names) {
    auto it = object_->find(name);
    if (it == object_->end()) continue;
    if (found == nullptr) {
      found = &*it;
      found_name = name;
    } else if (*found != *it) {
      // find() runs once per has/read of the key: report the conflict once.
      std::string conflict = fmt::format(
          "{} and {} name the same setting but differ ({} vs {}); keep one of them",
          join_path(path_, found_name), join_path(path_, name), show(*found), show(*it));
      auto& errors = diagnostics_.errors;
      if (std::find(errors.begin(), errors.end(), conflict) == errors.end())
        errors.push_back(std::move(conflict));
    }
  }
  if (found != nullptr) {
    bool recorded = false;
    for (const auto& used : used_names_)
      recorded = recorded || used.first == key;
    if (!recorded) used_names_.emplace_back(std::string(key), found_name);
  }
  return found;
}

std::string JsonReader::path_of(std::string_view key) {
  for (const auto& [canonical, written] : used_names_)
    if (canonical == key) return join_path(path_, written);
  return join_path(path_, key);
}

bool JsonReader::is_auto(std::string_view key) {
  const nlohmann::json* value = find(key);
  return value != nullptr && value->is_string() && value->get_ref<const std::string&>() == "auto";
}

bool JsonReader::take_auto(std::string_view key, const nlohmann::json& value,
                           const nlohmann::json& resolved, bool filled) {
  if (!value.is_string() || value.get_ref<const std::string&>() != "auto") return false;
  note_auto(key, show(resolved), filled ? "as the HF Trainer fills it" : default_source());
  return true;
}

std::string_view JsonReader::default_source() const {
  if (!default_source_.empty()) return default_source_;
  return path_.starts_with("strata") ? "strata's default" : "DeepSpeed's default";
}

void JsonReader::note_auto(std::string_view key, std::string_view value, std::string_view how) {
  diagnostics_.notes.push_back(fmt::format("{}: \"auto\" -> {} ({})", path_of(key), value, how));
  diagnostics_.auto_filled.push_back(fmt::format("{} {}", path_of(key), value));
}

bool JsonReader::read(std::string_view key, bool& target, std::optional<bool> auto_value) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return false;
  if (take_auto(key, *value, auto_value.value_or(target), auto_value.has_value())) {
    if (auto_value) target = *auto_value;
    return true;
  }
  if (!value->is_boolean()) {
    bad_value(key, "true or false (a JSON boolean, without quotes)");
    return true;
  }
  target = value->get<bool>();
  return true;
}

bool JsonReader::read(std::string_view key, std::optional<bool>& target) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return false;
  if (value->is_null() || take_auto(key, *value, nullptr, false)) {
    target.reset();
    return true;
  }
  bool flag = false;
  if (read(key, flag)) {
    if (value->is_boolean()) target = flag;
  }
  return true;
}

bool JsonReader::read(std::string_view key, std::int64_t& target, IntRange range,
                      std::optional<std::int64_t> auto_value) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return false;
  if (take_auto(key, *value, auto_value.value_or(target), auto_value.has_value())) {
    if (auto_value) target = *auto_value;
    return true;
  }
  auto number = value->is_boolean() ? std::nullopt : json_to_int(*value);
  if (!number || *number < range.min || *number > range.max) {
    bad_value(key, describe_int_range(range));
    return true;
  }
  target = *number;
  return true;
}

bool JsonReader::read(std::string_view key, std::optional<std::int64_t>& target, IntRange range) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return false;
  if (value->is_null() ||
      take_auto(key, *value, target ? nlohmann::json(*target) : nlohmann::json(), false)) {
    return true;  // null: not set; "auto": DeepSpeed's default, which is the target as it is
  }
  std::int64_t number = 0;
  auto before = diagnostics_.errors.size();
  read(key, number, range);
  if (diagnostics_.errors.size() == before) target = number;
  return true;
}

bool JsonReader::read(std::string_view key, double& target, RealRange range,
                      std::optional<double> auto_value) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return false;
  if (take_auto(key, *value, auto_value.value_or(target), auto_value.has_value())) {
    if (auto_value) target = *auto_value;
    return true;
  }
  auto number = value->is_boolean() ? std::nullopt : json_to_real(*value);
  bool in_range = number && (range.min_exclusive ? *number > range.min : *number >= range.min) &&
                  *number <= range.max;
  if (!in_range) {
    bad_value(key, describe_real_range(range));
    return true;
  }
  target = *number;
  return true;
}

bool JsonReader::read(std::string_view key, std::string& target) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return false;
  if (value->is_null()) {
    target.clear();
    return true;
  }
  if (take_auto(key, *value, target.empty() ? nlohmann::json() : nlohmann::json(target), false))
    return true;
  if (!value->is_string()) {
    bad_value(key, "a string");
    return true;
  }
  target = value->get<std::string>();
  return true;
}

bool JsonReader::enum_matches(std::string_view written, std::string_view name,
                              bool ignore_case) const {
  if (!ignore_case) return written == name;
  return written.size() == name.size() &&
         std::equal(written.begin(), written.end(), name.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) ==
                  std::tolower(static_cast<unsigned char>(b));
         });
}

void JsonReader::error(std::string_view key, std::string_view message) {
  diagnostics_.errors.push_back(fmt::format("{}: {}", path_of(key), message));
}

void JsonReader::bad_value(std::string_view key, std::string_view expected) {
  const nlohmann::json* value = object_ == nullptr ? nullptr : find(key);
  std::string given = value == nullptr ? "nothing" : show(*value);
  error(key, fmt::format("got {}, expected {}", given, expected));
}

void JsonReader::unsupported(std::string_view key, std::string_view what,
                             std::string_view instead) {
  const nlohmann::json* value = find(key);
  std::string given = value == nullptr ? "" : fmt::format("{} ", show(*value));
  error(key, fmt::format("{}({}) is not supported by strata; {}", given, what, instead));
}

std::vector<std::string> JsonReader::known_names() const {
  std::vector<std::string> names = known_;
  for (const auto& alias_pair : aliases_)
    names.push_back(alias_pair.first);
  return names;
}

void JsonReader::finish(bool as_warnings) {
  if (object_ == nullptr) return;
  std::vector<std::string> names = known_names();
  for (const auto& item : object_->items()) {
    const std::string& key = item.key();
    if (std::find(names.begin(), names.end(), key) != names.end()) continue;
    // Keys come from the user's file: show() replaces bytes that are not UTF-8.
    std::string quoted = show(nlohmann::json(key));
    std::string where = join_path(path_, quoted.substr(1, quoted.size() - 2));
    auto near = nearest_key(key, names);
    if (as_warnings) {
      std::string hint = near ? fmt::format("; did you mean \"{}\"?", *near) : std::string();
      diagnostics_.warnings.push_back(
          fmt::format("{}: unknown {}key, ignored (strata does not use it){}", where,
                      path_.empty() ? "top-level " : "", hint));
      continue;
    }
    std::string hint = near ? fmt::format("did you mean \"{}\"?", *near)
                            : fmt::format("known keys: {}", fmt::join(known_, ", "));
    diagnostics_.errors.push_back(fmt::format("{}: unknown key; {}", where, hint));
  }
}

}  // namespace strata::engine::detail
