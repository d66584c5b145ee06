#pragma once

#include <string>
#include <vector>

#include "base/error.h"

namespace strata::engine {

// A config the loader refuses. It carries every problem found, not only the first, each one
// naming its JSON path, the value given and what is allowed, for example
//   zero_optimization.offload_param.buffer_count: got -1, expected an integer >= 0
// `source` names where the config came from (a file path, or "config" for an in-memory one).
// Exit status 2 (bad config), as every UserError about usage or config.
class ConfigError : public UserError {
 public:
  ConfigError(std::string source, std::vector<std::string> problems);

  const std::string& source() const noexcept { return source_; }
  const std::vector<std::string>& problems() const noexcept { return problems_; }

 private:
  std::string source_;
  std::vector<std::string> problems_;
};

}  // namespace strata::engine
