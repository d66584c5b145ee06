#include "engine/config/config_format.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "engine/config/config_error.h"
#include "engine/config/json_reader.h"

namespace strata::engine::detail {
namespace {

constexpr int max_depth = 64;
constexpr std::size_t max_yaml_nodes = 100'000;

// 1-based line and column of byte `offset` of `text`.
std::pair<std::size_t, std::size_t> line_column(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  std::size_t line = 1;
  std::size_t column = 1;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// nlohmann's messages start with "[json.exception.parse_error.101] parse error at line 1,
// column 2: "; keep what follows, since we print the position ourselves.
// Bytes outside printable ASCII become \xNN: the parser quotes the input it stopped at, which may
// not be UTF-8, and the message must be printable and fit in a JSON string.
std::string parser_reason(const std::string& what) {
  std::string reason = what;
  auto close = reason.find("] ");
  if (reason.starts_with("[json.exception.") && close != std::string::npos)
    reason = reason.substr(close + 2);
  auto colon = reason.find(": ");
  if (reason.starts_with("parse error") && colon != std::string::npos)
    reason = reason.substr(colon + 2);
  std::string printable;
  for (char c : reason) {
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      printable += c;
    } else {
      printable += fmt::format("\\x{:02X}", byte);
    }
  }
  return printable;
}

// Thrown from the parser callback to stop at the first structural refusal.
struct Refusal {
  std::string message;
};

// The first byte that is not UTF-8, or npos. yaml-cpp passes such bytes through (nlohmann's JSON
// parser refuses them), and a config's strings end up in messages and JSON output that must be
// UTF-8; Accelerate reads its files as UTF-8 too.
std::size_t first_invalid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const std::size_t length = lead < 0x80           ? 1
                               : (lead >> 5) == 0x6  ? 2
                               : (lead >> 4) == 0xE  ? 3
                               : (lead >> 3) == 0x1E ? 4
                                                     : 0;
    if (length == 0 || i + length > text.size()) return i;
    for (std::size_t k = 1; k < length; ++k)
      if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return i;
    i += length;
  }
  return std::string_view::npos;
}

bool is_one_of(std::string_view text, std::initializer_list<std::string_view> words) {
  return std::find(words.begin(), words.end(), text) != words.end();
}

// A plain (unquoted) scalar as PyYAML's YAML 1.1 resolver types it.
nlohmann::json plain_scalar(const std::string& text) {
  if (is_one_of(text, {"", "~", "null", "Null", "NULL"})) return nullptr;
  if (is_one_of(text, {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})) return true;
  if (is_one_of(text, {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"}))
    return false;
  std::string digits = text;
  std::erase(digits, '_');
  std::int64_t integer = 0;
  const char* begin = digits.data() + (digits.starts_with('+') ? 1 : 0);
  auto [end, error] = std::from_chars(begin, digits.data() + digits.size(), integer);
  if (error == std::errc{} && end == digits.data() + digits.size()) return integer;
  // YAML 1.1 floats need a dot or an exponent ("1.0", "1e-5" is a string to PyYAML but a number
  // to every reader of a config; take it as one).
  bool numeric = digits.find_first_of(".eE") != std::string::npos;
  double real = 0;
  auto [real_end, real_error] = std::from_chars(begin, digits.data() + digits.size(), real);
  if (numeric && real_error == std::errc{} && real_end == digits.data() + digits.size() &&
      std::isfinite(real))
    return real;
  return text;
}

struct YamlConverter {
  std::size_t nodes = 0;

  nlohmann::json convert(const YAML::Node& node, int depth) {
    if (++nodes > max_yaml_nodes || depth > max_depth)
      throw std::length_error(
          "nested deeper than 64 levels or expanding past 100,000 nodes; an "
          "Accelerate config is a few dozen keys");
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        return nullptr;
      case YAML::NodeType::Scalar:
        // yaml-cpp tags a quoted scalar "!"; a plain one "?" (its type is left to the reader).
        if (node.Tag() == "!") return node.Scalar();
        return plain_scalar(node.Scalar());
      case YAML::NodeType::Sequence: {
        nlohmann::json array = nlohmann::json::array();
        for (const auto& item : node)
          array.push_back(convert(item, depth + 1));
        return array;
      }
      case YAML::NodeType::Map: {
        nlohmann::json object = nlohmann::json::object();
        for (const auto& item : node) {
          if (!item.first.IsScalar())
            throw std::invalid_argument("a mapping key that is not a plain string");
          const std::string& key = item.first.Scalar();
          if (object.contains(key))
            throw std::invalid_argument(
                fmt::format("duplicate key \"{}\"; give each key once", key));
          object[key] = convert(item.second, depth + 1);
        }
        return object;
      }
    }
    return nullptr;
  }
};

}  // namespace

std::string read_config_text(const std::filesystem::path& path, std::string_view what) {
  const std::string source = path.string();
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    throw ConfigError(source, {fmt::format("no such file; give the path of {} (configs/ holds "
                                           "examples)",
                                           what)});
  }
  if (std::filesystem::is_directory(path, error))
    throw ConfigError(source, {fmt::format("is a directory; give the path of {} file", what)});
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw ConfigError(source, {fmt::format("cannot be opened ({}); check its permissions",
                                           std::strerror(errno))});
  }
  // A config is a few KiB; a large file is something else given by mistake (a token file).
  constexpr std::uintmax_t max_bytes = 16 << 20;
  if (std::filesystem::file_size(path, error) > max_bytes) {
    throw ConfigError(source, {fmt::format("is {} bytes, larger than any config (16 MiB at most); "
                                           "give the path of {}",
                                           std::filesystem::file_size(path, error), what)});
  }
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) {
    throw ConfigError(source, {fmt::format("cannot be read ({}); check the file and its disk",
                                           std::strerror(errno))});
  }
  return text.str();
}

bool looks_like_json(std::string_view text) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte order mark
  auto first = std::find_if(text.begin(), text.end(),
                            [](char c) { return !std::isspace(static_cast<unsigned char>(c)); });
  return first == text.end() || *first == '{' || *first == '[';
}

nlohmann::json parse_json_text(std::string_view text, const std::string& source) {
  // Per open object, the keys seen so far: DeepSpeed loads configs with
  // dict_raise_error_on_duplicate_keys, and a silently dropped duplicate hides a mistake.
  std::vector<std::set<std::string>> open_objects;
  auto callback = [&open_objects](int depth, nlohmann::json::parse_event_t event,
                                  nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (depth > max_depth)
      throw Refusal{
          fmt::format("nested deeper than {} levels; a DeepSpeed config is shallow", max_depth)};
    if (event == Event::object_start) open_objects.emplace_back();
    if (event == Event::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == Event::key && !open_objects.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second)
        throw Refusal{fmt::format("duplicate key {}; give each key once", show(parsed))};
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::parse_error& error) {
    // error.byte is 1-based and points just past the offending character.
    auto [line, column] = line_column(text, error.byte == 0 ? 0 : error.byte - 1);
    throw ConfigError(source, {fmt::format("line {}, column {}: malformed JSON: {}; fix the "
                                           "syntax (a JSON validator shows the spot)",
                                           line, column, parser_reason(error.what()))});
  } catch (const nlohmann::json::exception& error) {
    // out_of_range 406: a number past a double's range ("1e999"); no position is given.
    std::string reason = parser_reason(error.what());
    if (reason.size() > 200) reason = reason.substr(0, 197) + "...";
    throw ConfigError(source, {fmt::format("malformed JSON: {}; write numbers a double can hold "
                                           "(at most about 1.8e308)",
                                           reason)});
  } catch (const Refusal& refusal) {
    throw ConfigError(source, {refusal.message});
  }
}

nlohmann::json parse_yaml_text(std::string_view text, const std::string& source) {
  if (std::size_t bad = first_invalid_utf8(text); bad != std::string_view::npos) {
    auto [line, column] = line_column(text, bad);
    throw ConfigError(source, {fmt::format("line {}, column {}: a byte that is not UTF-8; save the "
                                           "file as UTF-8",
                                           line, column)});
  }
  // yaml-cpp refuses nesting past 2,000 levels itself (YAML::DeepRecursion, a parser error);
  // the conversion below stops at 64 levels and 100,000 nodes, which also bounds what anchors
  // and aliases can expand to.
  YAML::Node document;
  try {
    document = YAML::Load(std::string(text));
  } catch (const YAML::Exception& error) {
    throw ConfigError(
        source,
        {fmt::format("line {}, column {}: neither JSON nor YAML ({}); strata reads "
                     "DeepSpeed JSON configs and Accelerate YAML configs: fix the syntax",
                     error.mark.line + 1, error.mark.column + 1, parser_reason(error.msg))});
  }
  try {
    YamlConverter converter;
    return converter.convert(document, 0);
  } catch (const std::exception& error) {
    throw ConfigError(source, {fmt::format("YAML: {}", error.what())});
  }
}

}  // namespace strata::engine::detail
