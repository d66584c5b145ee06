#include "models/generate/generation_config.h"

#include <fmt/format.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/error.h"

namespace strata::models::generate {
namespace {

using nlohmann::json;

[[noreturn]] void refuse(const std::filesystem::path& path, const std::string& what) {
  throw UserError(fmt::format("{}: {}", path.string(), what),
                  fmt::format("correct the value, or remove the key to take transformers' default "
                              "(the file is the folder's {})",
                              path.filename().string()),
                  2);
}

// `path` read as a JSON object.
json read_object(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) refuse(path, "cannot be read");
  json config;
  try {
    config = json::parse(in);
  } catch (const json::exception& error) {
    refuse(path, fmt::format("not JSON ({})", error.what()));
  }
  if (!config.is_object()) refuse(path, "not a JSON object");
  return config;
}

// The number at `key`, or nullptr when absent or null.
const json* number_at(const json& config, const std::filesystem::path& path, const char* key) {
  const auto found = config.find(key);
  if (found == config.end() || found->is_null()) return nullptr;
  if (!found->is_number())
    refuse(path, fmt::format("\"{}\" is {}, not a number", key, found->dump()));
  return &*found;
}

std::int32_t token_id(const json& value, const std::filesystem::path& path) {
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
      value.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
    refuse(path, fmt::format("\"eos_token_id\" holds {}, not a token id", value.dump()));
  }
  return static_cast<std::int32_t>(value.get<std::int64_t>());
}

std::vector<std::int32_t> eos_ids(const json& config, const std::filesystem::path& path) {
  const auto found = config.find("eos_token_id");
  if (found == config.end() || found->is_null()) return {};
  if (!found->is_array()) return {token_id(*found, path)};
  std::vector<std::int32_t> ids;
  for (const json& id : *found)
    ids.push_back(token_id(id, path));
  return ids;
}

void read_sampling(const json& config, const std::filesystem::path& path, SamplingOptions& out) {
  if (const auto found = config.find("do_sample"); found != config.end() && !found->is_null()) {
    if (!found->is_boolean())
      refuse(path, fmt::format("\"do_sample\" is {}, not true or false", found->dump()));
    out.sample = found->get<bool>();
  }
  if (const json* value = number_at(config, path, "temperature")) {
    out.temperature = value->get<double>();
    if (!(out.temperature > 0.0))
      refuse(path, fmt::format("\"temperature\" is {}, not above 0", value->dump()));
  }
  if (const json* value = number_at(config, path, "top_k")) {
    if (!value->is_number_integer() || value->get<std::int64_t>() < 0)
      refuse(path,
             fmt::format("\"top_k\" is {}, not a count of tokens (0 or more)", value->dump()));
    out.top_k = value->get<std::int64_t>();
  }
  if (const json* value = number_at(config, path, "top_p")) {
    out.top_p = value->get<double>();
    if (!(out.top_p > 0.0 && out.top_p <= 1.0))
      refuse(path, fmt::format("\"top_p\" is {}, not in (0, 1]", value->dump()));
  }
  if (const json* value = number_at(config, path, "min_p")) {
    out.min_p = value->get<double>();
    if (!(out.min_p >= 0.0 && out.min_p <= 1.0))
      refuse(path, fmt::format("\"min_p\" is {}, not in [0, 1]", value->dump()));
  }
}

std::optional<std::int64_t> max_new_tokens(const json& config, const std::filesystem::path& path) {
  const json* value = number_at(config, path, "max_new_tokens");
  if (value == nullptr) return std::nullopt;
  if (!value->is_number_integer() || value->get<std::int64_t>() < 1)
    refuse(path, fmt::format("\"max_new_tokens\" is {}, not a count of tokens (1 or more)",
                             value->dump()));
  return value->get<std::int64_t>();
}

}  // namespace

GenerationDefaults read_generation_config(const std::filesystem::path& folder) {
  GenerationDefaults defaults;
  const std::filesystem::path path = folder / "generation_config.json";
  if (!std::filesystem::exists(path)) {
    // transformers makes the generation config from the model's (from_model_config).
    const std::filesystem::path model = folder / "config.json";
    if (std::filesystem::exists(model)) defaults.eos_token_ids = eos_ids(read_object(model), model);
    return defaults;
  }
  const json config = read_object(path);
  read_sampling(config, path, defaults.sampling);
  defaults.eos_token_ids = eos_ids(config, path);
  defaults.max_new_tokens = max_new_tokens(config, path);
  return defaults;
}

}  // namespace strata::models::generate
