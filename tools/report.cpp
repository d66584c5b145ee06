#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "gpu/device_query.h"
#include "tools/commands.h"

namespace strata::tools {

void add_report_command(CLI::App& app, CommandContext& /*context*/) {
  auto* command = app.add_subcommand("report", "What this machine offers for offloaded training");
  auto json = std::make_shared<bool>(false);
  command->add_flag("--json", *json, "Print one JSON object instead of text");
  command->callback([json] {
    gpu::GpuInventory inventory = gpu::query_gpus();
    if (*json) {
      nlohmann::json out;
      out["gpus"] = nlohmann::json::array();
      for (const auto& gpu : inventory.gpus) {
        out["gpus"].push_back(
            {{"index", gpu.index}, {"name", gpu.name}, {"memory_bytes", gpu.memory_bytes}});
      }
      out["no_gpu_reason"] = inventory.no_gpu_reason;
      fmt::print("{}\n", out.dump(2));
      return;
    }
    if (inventory.gpus.empty()) fmt::print("GPU: no GPU ({})\n", inventory.no_gpu_reason);
    for (const auto& gpu : inventory.gpus)
      fmt::print("GPU {}: {}\n", gpu.index, gpu.name);
  });
}

}  // namespace strata::tools
