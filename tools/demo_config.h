#pragma once

#include <string_view>

namespace strata::tools {

// configs/demo.json, built into the binary: what `strata train` runs without --config.
std::string_view demo_config_json();

}  // namespace strata::tools
