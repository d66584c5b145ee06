#include "engine/config/placement.h"

#include <fmt/format.h>

namespace strata::engine {

std::vector<PlacementRefusal> placement_refusals(int stage, OffloadDevice offload_param,
                                                 OffloadDevice offload_optimizer) {
  std::vector<PlacementRefusal> refusals;
  const bool params_offloaded = offload_param != OffloadDevice::none;
  if (params_offloaded && stage != 3) {
    refusals.push_back({"offload_param",
                        fmt::format("device \"{}\" needs stage 3 (parameters are partitioned "
                                    "only at stage 3), but stage is {}",
                                    to_string(offload_param), stage),
                        "set \"stage\": 3 or remove offload_param",
                        "offload_param needs ZeRO stage 3"});
  }
  if (offload_optimizer == OffloadDevice::cpu && stage == 0) {
    refusals.push_back({"offload_optimizer",
                        "device \"cpu\" needs ZeRO stage 1, 2 or 3 (stage is 0)",
                        "set \"stage\": 2 or 3", "offload_optimizer needs ZeRO stage 1, 2 or 3"});
  }
  if (offload_optimizer == OffloadDevice::nvme && stage < 3) {
    refusals.push_back(
        {"offload_optimizer",
         fmt::format("device \"nvme\" at stage {} is not supported (DeepSpeed swaps optimizer "
                     "state to NVMe only at stage 3, and silently misbehaves below it)",
                     stage),
         "use stage 3, or device \"cpu\"", "offload_optimizer nvme needs ZeRO stage 3"});
  }
  if (params_offloaded && offload_optimizer == OffloadDevice::none) {
    refusals.push_back(
        {"offload_param",
         fmt::format("zero_optimization.offload_param.device is {} but offload_optimizer.device "
                     "is none: the fp32 master weights and optimizer states, 8x the size of the "
                     "16-bit parameters, would stay on the device",
                     to_string(offload_param)),
         fmt::format("offload the optimizer too (\"offload_optimizer\": {{\"device\": \"{}\"}}), "
                     "or set offload_param.device to none",
                     to_string(offload_param)),
         "offload_param needs offload_optimizer cpu or nvme", /*config_refuses=*/false});
  }
  return refusals;
}

}  // namespace strata::engine
