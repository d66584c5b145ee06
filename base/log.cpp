#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>
#include <string>

namespace strata::base {
namespace {

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

spdlog::level::level_enum& default_level() {
  static spdlog::level::level_enum level = spdlog::level::info;
  return level;
}

}  // namespace

spdlog::logger& logger(std::string_view folder) {
  std::lock_guard lock(registry_mutex());
  std::string name(folder);
  if (auto existing = spdlog::get(name)) return *existing;
  auto created = spdlog::stderr_color_mt(name);
  created->set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  created->set_level(default_level());
  return *created;
}

void set_log_level(spdlog::level::level_enum level) {
  std::lock_guard lock(registry_mutex());
  default_level() = level;
  spdlog::apply_all(
      [level](const std::shared_ptr<spdlog::logger>& each) { each->set_level(level); });
}

}  // namespace strata::base
