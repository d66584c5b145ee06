#pragma once

// Helpers shared by the config tests: where the fixture configs live and what a refused config
// said.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/config/config.h"
#include "engine/config/config_error.h"

namespace strata::engine::testing {

inline std::filesystem::path fixture(std::string_view kind, std::string_view name) {
  return std::filesystem::path(STRATA_SOURCE_DIR) / "tests/engine/configs" / kind / name;
}

inline LoadedConfig load_good(std::string_view name, int world_size = 1) {
  return load_config_file(fixture("good", name), world_size);
}

// The full message of the ConfigError that loading `name` from configs/bad throws ("" and a
// test failure when it loads).
inline std::string bad_file_error(std::string_view name, int world_size = 1) {
  try {
    load_config_file(fixture("bad", name), world_size);
  } catch (const ConfigError& error) {
    return error.what();
  }
  ADD_FAILURE() << name << " loaded, but should be refused";
  return "";
}

// The message of the ConfigError that parsing `text` (JSON) throws.
inline std::string text_error(std::string_view text, int world_size = 1) {
  try {
    parse_config_text(text, "config", world_size);
  } catch (const ConfigError& error) {
    return error.what();
  }
  ADD_FAILURE() << text << " loaded, but should be refused";
  return "";
}

}  // namespace strata::engine::testing
