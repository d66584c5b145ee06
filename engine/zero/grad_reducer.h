#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "aio/aligned_buffer.h"
#include "cpu_adam/optimizer.h"
#include "engine/memory/stream_ordered_memory.h"
#include "engine/zero/flat_layout.h"
#include "gpu/comm.h"
#include "gpu/device.h"
#include "gpu/ops.h"

namespace strata::engine::zero {

struct GradReducerOptions {
  int stage = 0;
  // The optimizer is offloaded: the rank's fp32 gradient partition lives in host memory.
  bool to_host = false;
  // offload_optimizer.pin_memory: the host partition and its staging buffer are page-locked.
  bool pin_memory = false;
  // zero_optimization.reduce_bucket_size: elements per collective call.
  std::int64_t bucket_elements = 500'000'000;
};

// Elements of each rank's block per reduce-scatter call, for a shard of `shard_numel` elements,
// `bucket_elements` per call and `world` ranks: the whole shard when it fits, else the shard cut
// into equal pieces (the last may be shorter), so that a shard just over the bucket is packed in
// two halves rather than a whole bucket and a sliver.
std::int64_t reduce_chunk_elements(std::int64_t shard_numel, std::int64_t bucket_elements,
                                   int world);

// Gradient reduction (docs/architecture.md, "One training step", 2): modules write their gradients
// into full fp32 buffers on the device; this turns them into the rank's fp32 gradient partition,
// averaged over ranks and accumulated over gradient_accumulation_steps. Stages 0 and 1 keep every
// module's buffer for the whole step and all-reduce it after the last micro-batch (stage 1 then
// keeps only its shard); stages 2 and 3 give each module a buffer for its backward only,
// reduce-scatter it after every micro-batch and add the shard to the partition. Collectives go in
// `reduce_bucket_size` pieces. The partition is on the device, or in host memory when the optimizer
// is offloaded (copied down after each reduction).
//
// All device work goes on `stream`, in order; not thread-safe.
class GradReducer {
 public:
  GradReducer(gpu::Device& device, gpu::Ops& ops, gpu::Comm& comm, gpu::Stream& stream,
              const FlatLayout& layout, memory::StreamOrderedMemory& memory,
              std::vector<std::string> module_names, GradReducerOptions options);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Zeroes the partition (and at stages 0-1 every module's buffer) for a new step.
  void begin_step();
  // Module `module`'s gradient tensors for this micro-batch's backward (zeroed when first made);
  // a module whose gradients another module also writes (a tied head) is made by the first.
  std::span<float* const> grads(int module);
  // Module `module`'s backward of micro-batch `micro` is done (every module that writes its
  // gradients has run): reduces what is due.
  void module_done(int module, bool last_micro);

  // The rank's gradient partition (partition_numel elements): device memory, or host memory
  // when to_host.
  float* device_partition() const { return device_partition_.as<float>(); }
  std::span<float> host_partition();
  // The squared L2 norm and inf/NaN flag of the whole model's gradients (every rank's partition
  // together); waits for the stream.
  cpu_adam::GradStats global_stats();

  // Host memory held that is not page-locked (pinned memory is the device's to count).
  std::int64_t unpinned_host_bytes() const { return pinned_memory_ ? 0 : host_bytes_; }

 private:
  struct Buffer {
    gpu::DeviceBuffer grads;  // fp32, padded_numel
    std::vector<float*> tensors;
  };
  bool keeps_full_buffers() const { return options_.stage <= 1; }
  void make(int module);
  void all_reduce(int module);
  void reduce_scatter(int module, float* shard);
  // Adds `count` floats of device memory at `source` to the partition at `offset`.
  void add_to_partition(std::int64_t offset, const float* source, std::int64_t count);

  gpu::Device& device_;
  gpu::Ops& ops_;
  gpu::Comm& comm_;
  gpu::Stream& stream_;
  const FlatLayout& layout_;
  memory::StreamOrderedMemory& memory_;
  std::vector<std::string> names_;
  GradReducerOptions options_;
  std::vector<Buffer> buffers_;
  gpu::DeviceBuffer device_partition_;
  // to_host: the partition and one shard's staging (copied down before it is added), in host
  // memory that is page-locked when pin_memory (one allocation either way).
  aio::AlignedBuffer host_memory_;
  gpu::PinnedBuffer pinned_memory_;
  float* host_partition_ = nullptr;
  float* staging_ = nullptr;
  std::int64_t host_bytes_ = 0;
  gpu::DeviceBuffer stats_;  // two floats: sum of squares, inf/NaN count
  gpu::PinnedBuffer stats_host_;
  cpu_adam::GradStats local_stats_;
};

}  // namespace strata::engine::zero
