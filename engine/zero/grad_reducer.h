#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/by_index.h"
#include "cpu_adam/optimizer.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/memory/stream_ordered_memory.h"
#include "engine/zero/cpu_queue.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/grad_reducer_plan.h"
#include "engine/zero/step_io.h"
#include "gpu/comm.h"
#include "gpu/device.h"
#include "gpu/event.h"
#include "gpu/ops.h"

namespace strata::engine::zero {

struct GradReducerOptions {
  int stage = 0;
  // The optimizer is offloaded: the rank's fp32 gradient partition lives in host memory.
  bool to_host = false;
  // With to_host, the partition lives in an extent of the rank's swap store instead (the
  // optimizer's states are on NVMe): CPU memory holds two pieces of sums and the staging ring, not
  // the partition.
  bool to_nvme = false;
  // to_nvme: that store, not yet open; the reducer reserves its extent in it.
  memory::NvmeStore* store = nullptr;
  // to_host: the rank's pool, not yet open; the reducer reserves its shelves in it (the partition
  // with the staging ring; with to_nvme the two piece sums with the staging, and the buffer
  // grads(range) reads into), and holds one buffer of each from open() on.
  memory::PinnedPool* pool = nullptr;
  // to_host: the rank's residency book, in which the gradient partition in CPU memory is
  // registered (with to_nvme the swap file is the reducer's own to move).
  memory::Residency* book = nullptr;
  // to_nvme: the most elements grads(range) is asked for at once (the largest sub-group).
  std::int64_t largest_read = 0;
  // With to_host, the partition holds bf16 gradients (bf16.bf16_master_weights_and_grads): each
  // reduced fp32 shard is added in fp32 and the sum rounded to nearest even.
  bool bf16 = false;
  // offload_optimizer.pin_memory: the host partition and its staging ring are page-locked.
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

// Gradients cross to host memory in pieces of at most this many elements (16 MiB of fp32): a
// module's reduced shard is copied down piece by piece into a ring of kGradStagingSlots pinned
// buffers, so the CPU adds one piece while the next comes down.
inline constexpr std::int64_t kGradPieceElements = std::int64_t{4} << 20;
inline constexpr int kGradStagingSlots = 3;

// The elements of one piece for `layout`: kGradPieceElements, or the largest shard when that is
// smaller (a multiple of 2048 either way, so that a piece of the gradient swap file is whole
// 4 KiB blocks).
std::int64_t grad_piece_elements(const FlatLayout& layout);

// Gradient reduction (docs/architecture.md, "One training step", 2): modules write their gradients
// into full fp32 buffers on the device; this turns them into the rank's fp32 gradient partition,
// averaged over ranks and accumulated over gradient_accumulation_steps. Stages 0 and 1 keep every
// module's buffer for the whole step and all-reduce it after the last micro-batch (stage 1 then
// keeps only its shard); stages 2 and 3 give each module a buffer for its backward only,
// reduce-scatter it after every micro-batch and add the shard to the partition. Collectives go in
// `reduce_bucket_size` pieces. The partition is on the device (added to by a kernel), or in host
// memory when the optimizer is offloaded, or with to_nvme in the rank's gradient swap file.
//
// Off the device, the compute stream does none of the work: it records an event when a shard is
// reduced, the copy stream (the device's d2h stream) waits for it and copies the shard down, and
// the reducer's CPU queue (its own thread, TBB inside) does the rest once each copy's event has
// fired. A step's first contribution to an fp32 partition in CPU memory is copied straight into
// it (and when it is also the last, its norm was taken on the device, so the queue only waits for
// its copy); every other contribution comes down in pieces through the staging ring, and the
// queue adds it to the partition (in fp32, or rounded once to bf16), or with to_nvme writes its
// piece to the swap file, reading back what earlier micro-batches put there (DeepSpeed's gradient
// swapping), each write left in flight while the queue goes on (write-behind, two piece buffers).
// The squared norm of each other final piece is taken on the way, so the norm needs no second
// pass. The engine's thread waits only to reuse a staging slot, never for the device.
//
// Device work goes on `stream` (reduction) and the d2h stream (copies), in order; not thread-safe,
// except grads(Range) and reductions(), which the optimizer's threads (the overlapped step's,
// LateSubGroups') may use.
class GradReducer final : public GradSource {
 public:
  GradReducer(gpu::Device& device, gpu::Ops& ops, gpu::Comm& comm, gpu::Stream& stream,
              const FlatLayout& layout, memory::StreamOrderedMemory& memory,
              std::vector<std::string> module_names, GradReducerOptions options);
  ~GradReducer() override;
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // The memory a reducer with these options holds for the whole run (grad_reducer_plan.cpp).
  static GradReducerPlan plan(const GradReducerOptions& options, const FlatLayout& layout);

  // to_host, once the pool is open: takes the reducer's buffers from its shelves (and registers
  // the partition in CPU memory in the book). Before the first begin_step.
  void open();

  // Starts a step: the device partition (and at stages 0-1 every module's buffer) is zeroed; a
  // partition off the device is not touched (each module's first contribution overwrites it).
  // Jobs left by a failed step are waited for first, their failure logged: it was reported.
  void begin_step();
  // Module `module`'s gradient tensors for this micro-batch's backward (zeroed when first made);
  // a module whose gradients another module also writes (a tied head) is made by the first.
  std::span<const gpu::Tensor> grads(int module);
  // Module `module`'s backward of micro-batch `micro` is done (every module that writes its
  // gradients has run): reduces what is due.
  void module_done(int module, bool last_micro);

  // The rank's gradient partition (partition_numel elements) in device memory (not to_host).
  float* device_partition() const { return device_partition_.as<float>(); }
  // With to_host: the CPU queue that lands the gradients. Once the job its last() named after
  // module_done(m, true) has run, module m's gradients are final in the partition.
  CpuQueue& reductions() { return jobs_; }
  // GradSource, with to_host: the gradients of `range` once the jobs that land them have run
  // (global_stats() waits for all of them; the overlapped step for the ones it needs): read from
  // the swap file with to_nvme, into a buffer of the largest range asked for. Throws
  // aio::IoError / ChecksumError for a failed read.
  std::span<const std::byte> grads(Range range) override;
  // The squared L2 norm and inf/NaN flag of the whole model's gradients (every rank's partition
  // together); waits for the reductions and the stream. Throws what a landing job threw.
  cpu_adam::GradStats global_stats();

  // The gradient swap file's size (0 unless to_nvme), and the bytes moved through it so far.
  std::int64_t nvme_bytes() const { return store_ ? store_->planned_bytes(extent_, 1) : 0; }
  std::int64_t nvme_read_bytes() const { return nvme_read_bytes_ + optimizer_read_bytes_; }
  std::int64_t nvme_write_bytes() const { return nvme_write_bytes_; }
  // Of nvme_read_bytes, what grads(Range) read for the optimizer (the rest: a later
  // micro-batch's read-back of the sums).
  std::int64_t optimizer_read_bytes() const { return optimizer_read_bytes_; }

 private:
  struct Buffer {
    gpu::DeviceBuffer grads;           // fp32, padded_numel
    std::vector<gpu::Tensor> tensors;  // fp32
  };
  // One piece of a contribution on its way down: partition elements [begin, begin + count) of
  // `module`, copied into staging slot `slot` (or, with slot -1, straight into the partition);
  // `copied` indexes the event that fires when it is down.
  struct Piece {
    int module = 0;
    int slot = -1;
    int copied = 0;
    bool first = false;   // the module's first contribution this step: it overwrites
    bool last = false;    // the last micro-batch's: the piece is final
    bool normed = false;  // final as it came down: its squares were summed on the device
    std::int64_t begin = 0;
    std::int64_t count = 0;
  };
  bool keeps_full_buffers() const { return options_.stage <= 1; }
  void make(int module);
  void all_reduce(int module);
  void reduce_scatter(int module, float* shard);
  // Adds module `module`'s reduced shard (shard_numel floats of device memory at `source`) to the
  // partition; `last_micro`: it is final.
  void add_to_partition(int module, const float* source, bool last_micro);
  // Off the device: enqueues the shard's copies on the d2h stream and their jobs on the queue.
  void land(int module, const float* source, bool last_micro);
  // The next copy event, once the job that last used it has run (a host wait only when the
  // queue is that far behind).
  int next_copy_event();
  // A job of the queue: the piece is down; add, swap or scan it.
  void land_piece(const Piece& piece);
  // A job of to_nvme: the piece in its staging slot goes into the swap file.
  void swap_piece(const Piece& piece);
  // to_nvme: waits for the writes in flight that cover any of partition elements [begin, end);
  // throws the first failure (aio::IoError) once all of them are waited for. Any thread.
  void finish_writes(std::int64_t begin, std::int64_t end);
  // A job of the queue: adds the squared norm and inf/NaN flag of a final piece of module
  // `name`, `count` gradients of the gradient type, to the step's.
  void scan_final(const Piece& piece, const std::byte* grads);
  // Construction: the to_host memory, reserved in the pool and the store; the norm's buffers.
  void reserve_host_memory();
  void make_norm_buffers();
  // This rank's sum of squares with the gradients on the device.
  double device_sum_squares();
  // Module `module`'s tiles in tile_partials_.
  std::span<cpu_adam::GradStats> module_tiles(int module);
  // The sums of squares of every rank's partition, from this rank's: an all-reduce of two floats
  // (sum, inf/NaN count) through page-locked memory. Waits for the stream.
  cpu_adam::GradStats reduce_stats(double local_sum_squares);

  gpu::Device& device_;
  gpu::Ops& ops_;
  gpu::Comm& comm_;
  gpu::Stream& stream_;
  gpu::Stream& copy_stream_;  // the device's d2h stream: gradients on their way down
  const FlatLayout& layout_;
  memory::StreamOrderedMemory& memory_;
  base::ByIndex<std::string> names_;
  GradReducerOptions options_;
  GradReducerPlan plan_;  // what the constructor reserves and allocates
  base::ByIndex<Buffer> buffers_;
  gpu::DeviceBuffer device_partition_;
  // to_host: the partition (or with to_nvme the two piece sums), in the gradient type, and the
  // staging ring (kGradStagingSlots pieces of fp32), in one buffer of the pool that is
  // page-locked when pin_memory.
  std::int64_t grad_bytes() const { return options_.bf16 ? 2 : 4; }
  float* staging(int slot) const { return staging_ + slot * plan_.piece_elements; }
  // out[i] = (earlier[i] + staged[i]) in the gradient type (earlier null: 0 + staged[i]).
  void add_staged(const std::byte* earlier, std::byte* out, const float* staged,
                  std::int64_t count) const;
  std::byte* host_partition_ = nullptr;
  float* staging_ = nullptr;
  // The queue and what it owns: the staging slots' and copy events' last jobs, the events, the
  // contributions each module made this step (counted on the engine's thread), and the final
  // pieces' statistics (the queue's, read once it has drained).
  CpuQueue jobs_;
  std::unique_ptr<gpu::Event> reduced_;      // on stream_: the shard being landed is complete
  std::unique_ptr<gpu::Event> copies_done_;  // on the copy stream: the last step's copies
  base::ByIndex<std::unique_ptr<gpu::Event>> copied_;
  base::ByIndex<CpuQueue::Ticket> copied_job_;
  int next_copied_ = 0;
  base::ByIndex<CpuQueue::Ticket> slot_job_{kGradStagingSlots};
  int next_slot_ = 0;
  base::ByIndex<int> contributions_;
  // to_host: every tile's sum of squares, module by module (module_first_tile_[m] is module m's
  // first, with one more entry at the end), for the modules whose final shard is scanned on the
  // CPU, piece by piece; each piece is one job's, so the jobs write disjoint tiles.
  std::vector<cpu_adam::GradStats> tile_partials_;
  base::ByIndex<std::int64_t> module_first_tile_;
  // Otherwise each module's sum of squares, as it comes down from the device.
  base::ByIndex<double> module_sums_;
  // A module's reduced fp32 shard that is final as it is (its first contribution is its last: one
  // micro-batch a step, or stages 0-1) has its sum of squares taken on the device, into its slot
  // of module_norms_, before it goes down: the CPU then only waits for its copy, and leaves its
  // cores and memory to the optimizer. The others are scanned on the CPU (tile_partials_), where
  // their sums are formed.
  gpu::DeviceBuffer module_norms_;        // double per module
  gpu::PinnedBuffer module_norms_host_;   // what comes down of it
  base::ByIndex<char> normed_on_device_;  // per module, this step
  // to_host: the pool's buffers: the partition (with to_nvme the piece sums) with the staging,
  // and with to_nvme what grads() reads into; to_nvme: the swap file (one extent: the
  // partition).
  memory::NvmeStore* store_ = nullptr;
  int extent_ = 0;  // the partition's extent in store_
  memory::PinnedPool::Shelf host_shelf_ = -1;
  memory::PinnedPool::Shelf read_shelf_ = -1;
  memory::PinnedPool::Lease host_buffer_;
  memory::PinnedPool::Lease read_buffer_;
  // The piece sums' writes in flight, the partition elements each covers, and the buffer the
  // next sum is formed in. The queue's jobs submit; they and grads() (the overlapped step's
  // thread) wait, one at a time under the mutex, so that a ticket is waited for once.
  static constexpr int kPieceWrites = 2;
  struct PieceWrite {
    std::optional<aio::Ticket> ticket;
    int module = 0;
    std::int64_t begin = 0;
    std::int64_t end = 0;
  };
  base::ByIndex<PieceWrite> writes_{kPieceWrites};
  int next_write_ = 0;
  std::mutex writes_mutex_;
  std::atomic<std::int64_t> nvme_read_bytes_ = 0;       // read-backs, by the queue's jobs
  std::atomic<std::int64_t> optimizer_read_bytes_ = 0;  // grads() runs on another thread
  std::atomic<std::int64_t> nvme_write_bytes_ = 0;      // added by the queue's jobs
  // The gradient norm's way down: this rank's sum of squares on the device (a double, from
  // sum_squares), then with several ranks the two floats of the all-reduce, in the same eight
  // bytes; page-locked host memory holds what comes down and goes up.
  struct GradNorm {
    double local_sum_squares;
    float reduced[2];
  };
  gpu::DeviceBuffer stats_;
  gpu::PinnedBuffer stats_host_;
};

}  // namespace strata::engine::zero
