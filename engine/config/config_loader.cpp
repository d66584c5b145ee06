// parse_config and its file and text front ends: the order sections are read in, the top-level
// scalars, and turning what the readers found into one ConfigError.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "base/assert.h"
#include "engine/config/config_error.h"
#include "engine/config/sections.h"

namespace strata::engine {
namespace {

constexpr int max_depth = 64;

// Top-level keys of DeepSpeed features strata refuses outright (rather than warning that they
// are ignored), because ignoring them would change what is trained.
void refuse_unsupported_top_level(detail::JsonReader& top) {
  const nlohmann::json* amp = top.find("amp");
  if (amp != nullptr && amp->is_object() && amp->contains("enabled") && (*amp)["enabled"] == true) {
    top.error("amp",
              "enabled true (Apex AMP) is not supported by strata; use "
              "\"bf16\": {\"enabled\": true} or \"fp16\": {\"enabled\": true} instead");
  }
}

LoadedConfig parse(const nlohmann::json& root, int world_size, const std::string& source) {
  STRATA_ASSERT(world_size >= 1);
  if (!root.is_object()) {
    throw ConfigError(source, {fmt::format("top level: got {}, expected a JSON object {{...}}",
                                           detail::show(root))});
  }
  detail::Diagnostics diagnostics;
  LoadedConfig loaded;
  Config& config = loaded.config;
  detail::JsonReader top(&root, "", diagnostics);
  // strata first: "auto" bucket sizes and total_num_steps derive from it.
  detail::read_strata(top, config.strata);
  detail::read_batch(top, world_size, config.batch);
  top.read("gradient_clipping", config.gradient_clipping, detail::RealRange{0, 1e300}, 1.0);
  top.read("steps_per_print", config.steps_per_print, detail::IntRange{1, INT64_MAX});
  top.read("wall_clock_breakdown", config.wall_clock_breakdown);
  detail::read_precision(top, config.fp16, config.bf16);
  detail::read_optimizer(top, config.optimizer);
  detail::read_scheduler(top, config.optimizer, config.strata, config.scheduler);
  detail::read_zero(top, config.strata.model, config.zero);
  detail::read_aio(top, config.aio);
  detail::read_activation_checkpointing(top, config.activation_checkpointing);
  refuse_unsupported_top_level(top);
  top.finish(/*as_warnings=*/true);
  if (!diagnostics.errors.empty()) throw ConfigError(source, std::move(diagnostics.errors));
  loaded.warnings = std::move(diagnostics.warnings);
  return loaded;
}

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

nlohmann::json parse_json(std::string_view text, const std::string& source) {
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
        throw Refusal{fmt::format("duplicate key {}; give each key once", detail::show(parsed))};
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

}  // namespace

Config default_config() {
  Config config;
  config.zero.overlap_comm = config.zero.stage == 3;
  config.scheduler.warmup_max_lr = config.optimizer.lr;
  return config;
}

LoadedConfig parse_config(const nlohmann::json& root, int world_size) {
  return parse(root, world_size, "config");
}

LoadedConfig parse_config_text(std::string_view text, const std::string& source, int world_size) {
  return parse(parse_json(text, source), world_size, source);
}

LoadedConfig load_config_file(const std::filesystem::path& path, int world_size) {
  const std::string source = path.string();
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    throw ConfigError(source, {"no such file; give the path of a DeepSpeed JSON config (configs/ "
                               "holds examples)"});
  }
  if (std::filesystem::is_directory(path, error)) {
    throw ConfigError(source, {"is a directory; give the path of a DeepSpeed JSON config file"});
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw ConfigError(source, {fmt::format("cannot be opened ({}); check its permissions",
                                           std::strerror(errno))});
  }
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) {
    throw ConfigError(source, {fmt::format("cannot be read ({}); check the file and its disk",
                                           std::strerror(errno))});
  }
  return parse_config_text(text.str(), source, world_size);
}

}  // namespace strata::engine
