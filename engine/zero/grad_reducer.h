#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aio/aligned_buffer.h"
#include "cpu_adam/optimizer.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/stream_ordered_memory.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/step_io.h"
#include "gpu/comm.h"
#include "gpu/device.h"
#include "gpu/ops.h"

namespace strata::engine::zero {

struct GradReducerOptions {
  int stage = 0;
  // The optimizer is offloaded: the rank's fp32 gradient partition lives in host memory.
  bool to_host = false;
  // With to_host, the partition lives in an extent of the rank's swap store instead (the
  // optimizer's states are on NVMe): CPU memory holds three module shards, not the partition.
  bool to_nvme = false;
  // to_nvme: that store, not yet open; the reducer reserves its extent in it.
  memory::NvmeStore* store = nullptr;
  // to_nvme: the rank's swap buffer pool, not yet open; the reducer reserves two shelves in it
  // (the two shard sums with the staging, and the buffer grads(range) reads into), and
  // holds one buffer of each from the first begin_step on.
  memory::PinnedPool* pool = nullptr;
  // to_nvme: the most elements grads(range) is asked for at once (the largest sub-group).
  std::int64_t largest_read = 0;
  // With to_host, the partition holds bf16 gradients (bf16.bf16_master_weights_and_grads): each
  // reduced fp32 shard is added in fp32 and the sum rounded to nearest even.
  bool bf16 = false;
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
// is offloaded (copied down after each reduction), or with to_nvme in the rank's gradient swap
// file: a shard's first contribution of a step is written there, each later one is read, added
// and written back, by stream tasks in stream order (DeepSpeed's gradient swapping), each write
// left in flight while the stream goes on (write-behind, two shard buffers); the final shard's
// squared norm is taken on the way, so the norm needs no second pass.
//
// All device work goes on `stream`, in order; not thread-safe, except grads(), which the
// overlapped step's thread may call for modules whose reduction has run.
class GradReducer final : public GradSource {
 public:
  GradReducer(gpu::Device& device, gpu::Ops& ops, gpu::Comm& comm, gpu::Stream& stream,
              const FlatLayout& layout, memory::StreamOrderedMemory& memory,
              std::vector<std::string> module_names, GradReducerOptions options);
  ~GradReducer() override;
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Zeroes the partition (and at stages 0-1 every module's buffer) for a new step.
  void begin_step();
  // Module `module`'s gradient tensors for this micro-batch's backward (zeroed when first made);
  // a module whose gradients another module also writes (a tied head) is made by the first.
  std::span<const gpu::Tensor> grads(int module);
  // Module `module`'s backward of micro-batch `micro` is done (every module that writes its
  // gradients has run): reduces what is due.
  void module_done(int module, bool last_micro);

  // The rank's gradient partition (partition_numel elements) in device memory (not to_host).
  float* device_partition() const { return device_partition_.as<float>(); }
  // GradSource, with to_host: the gradients of `range` once the step's reductions have run (read
  // from the swap file with to_nvme, into a buffer of the largest range asked for). Throws
  // aio::IoError / ChecksumError for a failed read.
  std::span<const std::byte> grads(Range range) override;
  // The squared L2 norm and inf/NaN flag of the whole model's gradients (every rank's partition
  // together); waits for the stream.
  cpu_adam::GradStats global_stats();

  // Host memory held that is not page-locked (pinned memory is the device's to count, and the
  // swap buffers with to_nvme are the pool's).
  std::int64_t unpinned_host_bytes() const { return host_memory_.size_bytes(); }
  // The gradient swap file's size (0 unless to_nvme), and the bytes moved through it so far.
  std::int64_t nvme_bytes() const { return store_ ? store_->planned_bytes(extent_, 1) : 0; }
  std::int64_t nvme_read_bytes() const { return nvme_read_bytes_; }
  std::int64_t nvme_write_bytes() const { return nvme_write_bytes_; }

 private:
  struct Buffer {
    gpu::DeviceBuffer grads;  // fp32, padded_numel
    std::vector<gpu::Tensor> tensors;  // fp32
  };
  bool keeps_full_buffers() const { return options_.stage <= 1; }
  void make(int module);
  void all_reduce(int module);
  void reduce_scatter(int module, float* shard);
  // Adds module `module`'s reduced shard (shard_numel floats of device memory at `source`) to the
  // partition; `last_micro`: it is final.
  void add_to_partition(int module, const float* source, bool last_micro);
  // A stream task of to_nvme: the shard in staging_ goes into the swap file.
  void swap_shard(int module, bool last_micro);
  // to_nvme: waits for the writes in flight that cover any of partition elements [begin, end);
  // throws the first failure (aio::IoError) once all of them are waited for. Any thread.
  void finish_writes(std::int64_t begin, std::int64_t end);
  // The squared norm and inf/NaN flag of `count` gradients of the gradient type.
  cpu_adam::GradStats scan(const std::byte* grads, std::int64_t count) const;

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
  // to_host: the partition (or with to_nvme a shard read back to be added to), in the gradient
  // type, and one fp32 shard's staging (copied down before it is added), in host memory that is
  // page-locked when pin_memory (one allocation either way; with to_nvme a pool buffer).
  std::int64_t grad_bytes() const { return options_.bf16 ? 2 : 4; }
  // out[i] = (earlier[i] + staging_[i]) in the gradient type (earlier null: 0 + staging_[i]).
  void add_staged(const std::byte* earlier, std::byte* out, std::int64_t count) const;
  aio::AlignedBuffer host_memory_;
  gpu::PinnedBuffer pinned_memory_;
  std::byte* host_partition_ = nullptr;
  float* staging_ = nullptr;
  std::int64_t host_bytes_ = 0;
  std::int64_t staging_offset_ = 0;  // where the staging starts in that memory
  // to_nvme: the swap file (one extent: the partition), how many contributions each module's
  // shard has this step, the final shards' statistics, and the pool's buffers: the shard being
  // added to with the staging, and what grads() reads into.
  memory::NvmeStore* store_ = nullptr;
  int extent_ = 0;  // the partition's extent in store_
  std::vector<int> contributions_;
  cpu_adam::GradStats swapped_stats_;
  memory::PinnedPool::Shelf swap_shelf_ = 0;
  memory::PinnedPool::Shelf read_shelf_ = 0;
  memory::PinnedPool::Lease swap_buffer_;
  memory::PinnedPool::Lease read_buffer_;
  // The shard buffers' writes in flight, the partition elements each covers, and the buffer the
  // next sum is formed in. The stream's tasks submit; they and grads() (the overlapped step's
  // thread) wait, one at a time under the mutex, so that a ticket is waited for once.
  static constexpr int kShardWrites = 2;
  struct ShardWrite {
    std::optional<aio::Ticket> ticket;
    int module = 0;
    std::int64_t begin = 0;
    std::int64_t end = 0;
  };
  std::array<ShardWrite, kShardWrites> writes_;
  int next_write_ = 0;
  std::mutex writes_mutex_;
  std::int64_t shard_bytes_ = 0;  // one shard buffer: the largest shard in the gradient type
  std::atomic<std::int64_t> nvme_read_bytes_ = 0;   // grads() may run on another thread
  std::atomic<std::int64_t> nvme_write_bytes_ = 0;  // added by stream tasks
  // The gradient norm's way down: this rank's sum of squares (inf or NaN when a gradient is),
  // then with several ranks the all-reduced sum and inf/NaN count. Page-locked host memory
  // (stats_host_) holds both; the device's eight bytes (stats_) hold the double first, then, in
  // stream order once it has gone down, the two floats of the all-reduce.
  struct GradNorm {
    double local_sum_squares;
    float reduced[2];

    static cpu_adam::GradStats stats(double sum_squares) {
      return cpu_adam::GradStats{sum_squares, !std::isfinite(sum_squares)};
    }
  };
  gpu::DeviceBuffer stats_;
  gpu::PinnedBuffer stats_host_;
};

}  // namespace strata::engine::zero
