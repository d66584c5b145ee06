// zero_optimization.offload_param and offload_optimizer (deepspeed/runtime/zero/offload_config.py).
#include <fmt/format.h>

#include "engine/config/sections.h"

namespace strata::engine {

const char* to_string(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::none:
      return "none";
    case OffloadDevice::cpu:
      return "cpu";
    case OffloadDevice::nvme:
      return "nvme";
  }
  return "?";
}

namespace detail {
namespace {

constexpr std::string_view param_key = "offload_param";

// Keys that belong to only one of the two sections: named as such when given in the other.
const std::vector<std::string_view> param_only_keys = {"buffer_size", "max_in_cpu"};
const std::vector<std::string_view> optimizer_only_keys = {
    "pipeline_read", "pipeline_write",      "fast_init",         "ratio",
    "super_offload", "convert_grad_on_cpu", "cpuadam_cores_perc"};

void refuse_keys_of_other(JsonReader& section, bool is_param) {
  const auto& other_keys = is_param ? optimizer_only_keys : param_only_keys;
  const char* other = is_param ? "offload_optimizer" : "offload_param";
  for (std::string_view key : other_keys) {
    if (section.has(key))
      section.error(key, fmt::format("is a key of zero_optimization.{}, not of this section; "
                                     "move it there or remove it",
                                     other));
  }
}

void read_optimizer_only(JsonReader& section, OffloadConfig& out) {
  section.read("pipeline_read", out.pipeline_read);
  section.read("pipeline_write", out.pipeline_write);
  section.read("fast_init", out.fast_init);
  section.read("ratio", out.ratio, RealRange{0, 1});
  if (out.ratio < 1)
    section.unsupported("ratio", "partial optimizer offload (Twin-Flow)",
                        "set it to 1 (offload all optimizer state) or set device to \"none\"");
  bool super_offload = false;
  section.read("super_offload", super_offload);
  if (super_offload)
    section.unsupported("super_offload", "SuperOffload for Grace-Hopper superchips",
                        "set it to false");
  bool convert_on_cpu = true;
  section.read("convert_grad_on_cpu", convert_on_cpu);
  double cores = 0.8;
  section.read("cpuadam_cores_perc", cores, RealRange{0, 1});
}

// buffer_count 0: DeepSpeed validates it (ge=0) and uses no buffer unless the device is nvme,
// where its swapper cannot move a tensor through zero buffers. strata refuses that case up front
// and, elsewhere, keeps the one buffer its CPU step holds in flight.
void check_buffer_count(JsonReader& section, OffloadConfig& out) {
  if (out.buffer_count != 0) return;
  if (out.device == OffloadDevice::nvme) {
    section.error("buffer_count",
                  "0 with device \"nvme\" leaves no buffer to swap through; set it to 4 or more "
                  "(DeepSpeed's defaults are 5 for offload_param, 4 for offload_optimizer)");
    return;
  }
  out.buffer_count = 1;
  section.diagnostics().notes.push_back(
      fmt::format("{}: 0 read as 1 (only device \"nvme\" swaps through these buffers)",
                  section.path_of("buffer_count")));
}

}  // namespace

void read_offload(JsonReader& zero, std::string_view key, OffloadConfig& out) {
  const bool is_param = key == param_key;
  JsonReader section(zero.find(key), zero.path_of(key), zero.diagnostics());
  section.read_enum(
      "device", out.device,
      {{"none", OffloadDevice::none}, {"cpu", OffloadDevice::cpu}, {"nvme", OffloadDevice::nvme}});
  section.read("nvme_path", out.nvme_path);
  // DeepSpeed accepts 0 (ge=0); it swaps through no buffers only when nothing is on NVMe.
  section.read("buffer_count", out.buffer_count, IntRange{0, 1 << 20});
  section.read("pin_memory", out.pin_memory);
  refuse_keys_of_other(section, is_param);
  if (is_param) {
    section.read("buffer_size", out.buffer_size, IntRange{0, INT64_MAX});
    section.read("max_in_cpu", out.max_in_cpu, IntRange{0, INT64_MAX});
  } else {
    read_optimizer_only(section, out);
  }
  check_buffer_count(section, out);
  if (out.device == OffloadDevice::nvme && out.nvme_path.empty()) {
    section.error("nvme_path",
                  "missing; device \"nvme\" needs the directory for swap files, e.g. "
                  "\"nvme_path\": \"/local_nvme\" (a fast local disk, not tmpfs or NFS)");
  }
  section.finish();
}

}  // namespace detail
}  // namespace strata::engine
