#include "engine/zero/offload_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "base/error.h"
#include "base/units.h"

namespace strata::engine::zero {

aio::EngineOptions aio_options(const AioConfig& aio) {
  aio::EngineOptions options;
  options.block_size_bytes = aio.block_size;
  options.queue_depth = static_cast<int>(aio.queue_depth);
  options.thread_count = static_cast<int>(aio.intra_op_parallelism);
  options.single_submit = aio.single_submit;
  options.overlap_events = aio.overlap_events;
  options.verify_checksums = aio.verify;
  return aio::apply_environment(options);
}

namespace {

memory::NvmeStoreOptions store_options(const Config& config, const OffloadConfig& offload,
                                       int rank) {
  memory::NvmeStoreOptions store;
  store.nvme_path = offload.nvme_path;
  store.job_name = config.strata.job_name;
  store.rank = rank;
  store.aio = aio_options(config.aio);
  return store;
}

bool section_pins(const OffloadConfig& offload) {
  return offload.device != OffloadDevice::none && offload.pin_memory;
}

// "zero_optimization.offload_optimizer.pin_memory asks", or both sections named.
std::string pinning_keys(const Config& config) {
  std::vector<std::string> keys;
  if (section_pins(config.zero.offload_param))
    keys.emplace_back("zero_optimization.offload_param.pin_memory");
  if (section_pins(config.zero.offload_optimizer))
    keys.emplace_back("zero_optimization.offload_optimizer.pin_memory");
  return fmt::format("{} {}", fmt::join(keys, " and "), keys.size() == 1 ? "asks" : "ask");
}

}  // namespace

OptimizerOffloadOptions optimizer_offload_options(const Config& config, int rank) {
  const OffloadConfig& offload = config.zero.offload_optimizer;
  OptimizerOffloadOptions options;
  options.device = offload.device;
  options.sub_group_size = config.zero.sub_group_size;
  options.pipeline_read = offload.pipeline_read;
  options.pipeline_write = offload.pipeline_write;
  options.buffer_count = offload.buffer_count;
  options.pin_memory = offload.pin_memory;
  options.nvme = store_options(config, offload, rank);
  options.types = state_types(config.bf16);
  return options;
}

ParamTierOptions param_tier_options(const Config& config, int rank, std::int64_t element_bytes) {
  const OffloadConfig& offload = config.zero.offload_param;
  ParamTierOptions options;
  options.device = offload.device;
  options.element_bytes = element_bytes;
  options.max_in_cpu = offload.max_in_cpu;
  options.buffer_count = offload.buffer_count;
  options.buffer_size = offload.buffer_size;
  options.pin_memory = offload.pin_memory;
  options.nvme = store_options(config, offload, rank);
  return options;
}

bool pins_memory(const Config& config) {
  return section_pins(config.zero.offload_param) || section_pins(config.zero.offload_optimizer);
}

std::optional<std::string> settle_pin_memory(Config& config, std::int64_t pinned_bytes,
                                             std::int64_t held_bytes,
                                             const gpu::PinnedLimit& limit) {
  if (!pins_memory(config) || limit.allows(held_bytes, pinned_bytes)) return std::nullopt;
  const std::string held = held_bytes > 0
                               ? fmt::format(" and {} is locked already",
                                             base::format_bytes(static_cast<double>(held_bytes)))
                               : "";
  const std::string cause =
      fmt::format("{} for {} ({} bytes) of page-locked host memory, but this process may lock {}{}",
                  pinning_keys(config), base::format_bytes(static_cast<double>(pinned_bytes)),
                  pinned_bytes, limit.describe(), held);
  const std::string raise = gpu::raise_pinned_limit_fix(held_bytes + pinned_bytes);
  if (config.strata.require_pinned_memory) {
    throw UserError(fmt::format("{}; strata.require_pinned_memory is true, so the run does not "
                                "train unpinned",
                                cause),
                    fmt::format("{}. Or set pin_memory to false, or strata.require_pinned_memory "
                                "to false to train unpinned when the memory cannot be locked",
                                raise),
                    1);
  }
  config.zero.offload_param.pin_memory = false;
  config.zero.offload_optimizer.pin_memory = false;
  return fmt::format(
      "{}: training from unpinned host memory instead (host-device copies are slower). To pin, {}. "
      "To train unpinned without this warning, set pin_memory to false; to refuse instead, set "
      "strata.require_pinned_memory to true",
      cause, raise);
}

}  // namespace strata::engine::zero
