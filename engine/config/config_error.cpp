#include "engine/config/config_error.h"

#include <fmt/format.h>

#include <utility>

namespace strata::engine {
namespace {

std::string describe(const std::string& source, const std::vector<std::string>& problems) {
  if (problems.size() == 1) return fmt::format("{}: {}", source, problems.front());
  std::string text = fmt::format("{}: {} problems", source, problems.size());
  for (const auto& problem : problems)
    text += fmt::format("\n  - {}", problem);
  return text;
}

}  // namespace

ConfigError::ConfigError(std::string source, std::vector<std::string> problems)
    : UserError(describe(source, problems),
                "correct the keys named above (DeepSpeed's names and meanings; strata's own "
                "settings go under \"strata\"); `strata config check FILE` shows every resolved "
                "value",
                2),
      source_(std::move(source)),
      problems_(std::move(problems)) {}

}  // namespace strata::engine
