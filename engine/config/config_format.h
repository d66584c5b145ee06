#pragma once

// A config file's bytes to one JSON document. DeepSpeed configs are JSON; Accelerate configs are
// YAML (or Accelerate's JSON form). Which one a file is follows from its first character: a JSON
// document starts with '{' or '[', so a broken JSON file is reported as malformed JSON at its
// line and column rather than misread as YAML.

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace strata::engine::detail {

// The file's text. Throws ConfigError naming `path` when it is missing, a directory, unreadable
// or over 16 MiB; `what` names the expected content in the fix ("a DeepSpeed JSON config").
std::string read_config_text(const std::filesystem::path& path, std::string_view what);

// True when `text` is to be read as JSON: its first non-blank character is '{' or '[', or it is
// blank (an empty file is reported as malformed JSON, the format strata documents first).
bool looks_like_json(std::string_view text);

// Parses JSON with DeepSpeed's rules: duplicate keys refused (DeepSpeed loads configs with
// dict_raise_error_on_duplicate_keys), nesting deeper than 64 levels refused. Errors are
// ConfigErrors with the line and column where the parser stopped.
nlohmann::json parse_json_text(std::string_view text, const std::string& source);

// Parses YAML (YAML 1.1 scalars as PyYAML reads them, which is how Accelerate loads its configs:
// true/false/yes/no/on/off booleans, null and ~, integers, floats with a dot or exponent).
// Throws ConfigError saying the file is neither JSON nor YAML, with the YAML parser's line and
// column, when it is not YAML either; refuses bytes that are not UTF-8, anchors' expansions past
// 100,000 nodes and nesting deeper than 64 levels, which no Accelerate config has.
nlohmann::json parse_yaml_text(std::string_view text, const std::string& source);

}  // namespace strata::engine::detail
