#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace strata::base {

// The logger of one folder ("aio", "cpu_adam", "gpu", "engine", "models", "tools"), created on
// first use, writing to stderr so that `--json` output on stdout stays clean.
spdlog::logger& logger(std::string_view folder);

// Sets the level of every strata logger, present and future ("debug", "info", "warn", ...).
void set_log_level(spdlog::level::level_enum level);

}  // namespace strata::base
