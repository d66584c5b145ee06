#pragma once

// Typed reading of one JSON object of a config, recording problems instead of throwing so that a
// config with several mistakes reports all of them at once.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::engine::detail {

// What reading a config found wrong (errors), worth warning about (warnings), and how it resolved
// what the file left open (notes: each "auto" and the value it became), in the order found.
struct Diagnostics {
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  std::vector<std::string> notes;
  // Each "auto" fill as "<path> <value>" (its note says why), for a one-line summary.
  std::vector<std::string> auto_filled;
};

// "zero_optimization" + "stage" -> "zero_optimization.stage"; "" + "fp16" -> "fp16".
std::string join_path(std::string_view parent, std::string_view key);

// A value as the user wrote it, compact and cut at 60 characters: 5, "auto", [0.9,0.999].
std::string show(const nlohmann::json& value);

// `text` in lower case (ASCII): DeepSpeed and Accelerate match some names case-insensitively.
std::string lowercase(std::string text);

// Levenshtein distance, for "did you mean".
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `key` when it is near enough to be a likely typo (distance at most a
// third of the key's length, and at least 2 allowed), else nullopt. Ties go to the earlier one.
std::optional<std::string> nearest_key(std::string_view key,
                                       const std::vector<std::string>& candidates);

// Inclusive bounds of an integer key.
struct IntRange {
  std::int64_t min = 0;
  std::int64_t max = INT64_MAX;
};

// Bounds of a real key; `min_exclusive` makes the lower bound strict (lr > 0).
struct RealRange {
  double min = 0;
  double max = 1e300;
  bool min_exclusive = false;
};

// The integer a JSON value denotes: an integer, a float with no fraction (5e8, 1e9) or a string
// holding either ("5e8"). nullopt for anything else (2.5, true, "abc", out of int64's range).
std::optional<std::int64_t> json_to_int(const nlohmann::json& value);

// The number a JSON value denotes: a number or a string holding a finite one ("3e-5").
std::optional<double> json_to_real(const nlohmann::json& value);

// One name of an enum value as JSON spells it.
template <class Enum>
struct EnumName {
  std::string_view name;
  Enum value;
};

// Reads the keys of one object at `path`. Every key a read_* or accept call names becomes known;
// finish() reports the keys that no call named, with the nearest known key. A key may have
// aliases (other names for the same setting); giving two names with different values is an
// error.
//
// "auto" is DeepSpeed's rule (deepspeed/runtime/config_utils.py, DeepSpeedConfigModel drops every
// key whose value is "auto"): a read of an "auto" key keeps the target's default, unless the read
// is given an `auto_value`, the value strata fills in from the model and run as the Hugging Face
// Trainer would. Either way a note records what "auto" became.
class JsonReader {
 public:
  // `object` may be null or JSON null (section not given): every read keeps its default. Any other
  // non-object is an error at `path`, and the section then reads as not given.
  JsonReader(const nlohmann::json* object, std::string path, Diagnostics& diagnostics);

  bool present() const { return object_ != nullptr; }
  const std::string& path() const { return path_; }
  Diagnostics& diagnostics() { return diagnostics_; }

  // Declares `alias_key` as another name of `key`.
  void alias(std::string_view key, std::string_view alias_key);
  // Marks keys as known without reading them (read elsewhere, or accepted and unused).
  void accept(std::initializer_list<std::string_view> keys);
  // The value under `key` or one of its aliases (nullptr when absent); marks the key known.
  const nlohmann::json* find(std::string_view key);
  // The path of `key` as the user wrote it (the alias, when the alias was used).
  std::string path_of(std::string_view key);
  bool has(std::string_view key) { return find(key) != nullptr; }
  bool is_auto(std::string_view key);

  // Each read leaves `target` unchanged when the key is absent (or invalid, after recording the
  // error) and returns whether the key was given.
  bool read(std::string_view key, bool& target, std::optional<bool> auto_value = {});
  bool read(std::string_view key, std::optional<bool>& target);  // null allowed
  bool read(std::string_view key, std::int64_t& target, IntRange range,
            std::optional<std::int64_t> auto_value = {});
  bool read(std::string_view key, std::optional<std::int64_t>& target, IntRange range);
  bool read(std::string_view key, double& target, RealRange range,
            std::optional<double> auto_value = {});
  bool read(std::string_view key, std::string& target);  // null reads as ""

  // Names where this section's defaults come from in notes (DeepSpeed's, or strata's for its own
  // section, unless set here: "Accelerate's default").
  void set_default_source(std::string source) { default_source_ = std::move(source); }

  // Records that `key`, given as "auto", became `value` (shown as written in JSON), filled
  // `how` ("DeepSpeed's default", "from strata.model.d_model as the HF Trainer fills it").
  void note_auto(std::string_view key, std::string_view value, std::string_view how);

  template <class Enum>
  bool read_enum(std::string_view key, Enum& target, std::initializer_list<EnumName<Enum>> names,
                 bool ignore_case = false);

  // Records "<path>.<key>: <message>".
  void error(std::string_view key, std::string_view message);
  // Records "<path>.<key>: got <value>, expected <expected>".
  void bad_value(std::string_view key, std::string_view expected);
  // Records that the value given for `key` names a feature strata does not implement.
  void unsupported(std::string_view key, std::string_view what, std::string_view instead);

  // Reports every key not named by a read or accept: an error ("unknown key") or, with
  // `as_warnings`, a warning ("ignored").
  void finish(bool as_warnings = false);

 private:
  // True when `value` is "auto"; notes what it became (`resolved`, or the default kept).
  bool take_auto(std::string_view key, const nlohmann::json& value, const nlohmann::json& resolved,
                 bool filled);
  std::vector<std::string> known_names() const;
  // Where a key's default comes from, for notes: DeepSpeed's, or strata's for its own section.
  std::string_view default_source() const;
  bool enum_matches(std::string_view written, std::string_view name, bool ignore_case) const;

  const nlohmann::json* object_ = nullptr;
  std::string path_;
  Diagnostics& diagnostics_;
  std::vector<std::string> known_;                               // canonical keys, in read order
  std::vector<std::pair<std::string, std::string>> aliases_;     // (alias, canonical)
  std::vector<std::pair<std::string, std::string>> used_names_;  // (canonical, name written)
  std::string default_source_;
};

template <class Enum>
bool JsonReader::read_enum(std::string_view key, Enum& target,
                           std::initializer_list<EnumName<Enum>> names, bool ignore_case) {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return false;
  if (is_auto(key)) {
    for (const auto& name : names)
      if (name.value == target)
        note_auto(key, '"' + std::string(name.name) + '"', default_source());
    return true;
  }
  std::string allowed;
  for (const auto& name : names) {
    if (!allowed.empty()) allowed += ", ";
    allowed += '"' + std::string(name.name) + '"';
  }
  if (!value->is_string()) {
    bad_value(key, "one of " + allowed);
    return true;
  }
  const auto& written = value->get_ref<const std::string&>();
  for (const auto& name : names) {
    if (enum_matches(written, name.name, ignore_case)) {
      target = name.value;
      return true;
    }
  }
  bad_value(key, "one of " + allowed);
  return true;
}

}  // namespace strata::engine::detail
