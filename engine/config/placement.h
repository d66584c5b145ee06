#pragma once

#include <string>
#include <vector>

#include "engine/config/config.h"

namespace strata::engine {

// A placement of the model's states (the ZeRO stage and where offload_param and offload_optimizer
// put them) that does not run, for the one rule the config check, the engine and `strata
// estimate` share.
struct PlacementRefusal {
  std::string key;     // the zero_optimization key it comes from
  std::string cause;   // what is wrong, as the config check and the engine say it
  std::string fix;     // the config change that fixes it
  std::string reason;  // the short form `strata estimate` gives
  // The config is refused (DeepSpeed refuses it or misbehaves with it); otherwise the config is
  // DeepSpeed's to accept, and strata's engine refuses to train with it.
  bool config_refuses = true;
};

// Every rule the placement breaks, in a fixed order (parameters, then the optimizer); empty when
// it runs. `stage` is 0 to 3.
std::vector<PlacementRefusal> placement_refusals(int stage, OffloadDevice offload_param,
                                                 OffloadDevice offload_optimizer);

}  // namespace strata::engine
