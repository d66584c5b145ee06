#include "engine/zero/offload_options.h"

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

}  // namespace strata::engine::zero
