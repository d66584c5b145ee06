#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "aio/aligned_buffer.h"
#include "base/by_index.h"
#include "base/error.h"
#include "base/failure_latch.h"
#include "engine/config/config.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/optimizer.h"
#include "engine/zero/flat_layout.h"

namespace strata::engine::zero {

struct OptimizerOffloadOptions {
  // Where the optimizer states live: cpu or nvme (none is refused: there is nothing to offload).
  OffloadDevice device = OffloadDevice::cpu;
  std::int64_t sub_group_size = 1'000'000'000;  // zero_optimization.sub_group_size, elements
  // The partition's cut into sub-groups when given (make_sub_groups of the layout, which knows
  // the module shards that sub_group_size 0 cuts at); empty: cut by sub_group_size alone.
  std::vector<Range> sub_groups;
  bool pipeline_read = false;     // offload_optimizer.pipeline_read
  bool pipeline_write = false;    // offload_optimizer.pipeline_write
  std::int64_t buffer_count = 4;  // offload_optimizer.buffer_count: sub-groups in flight
  bool pin_memory = true;         // offload_optimizer.pin_memory (the swap buffers)
  // Sub-groups whose prior value step_sub_groups can keep for undo_kept (the rollback window of
  // strata.overlap_optimizer): that many extents of CPU memory, allocated up front. 0: none.
  std::int64_t keep_capacity = 0;
  // Bytes per element of the parameters a step hands its ParamSink: 2 (a 16-bit copy) or 4
  // (fp32). A kept sub-group holds its new parameters until commit_kept.
  std::int64_t keep_param_bytes_per_element = 2;
  // The states' element types (bf16.bf16_master_weights_and_grads, bf16_optimizer_states); the
  // gradients StepIo brings have the master's type.
  StateTypes types;
  // nvme: nvme_path, job, rank, aio options (and fault injection for tests): what the rank's
  // swap store is opened with.
  memory::NvmeStoreOptions nvme;
  // nvme: the rank's swap store, not yet open, in which the states reserve their extents.
  memory::NvmeStore* store = nullptr;
  // The rank's pool, not yet open, in which the states reserve their shelf (OptimizerStatesPlan);
  // its owner opens it and then calls OptimizerStates::open().
  memory::PinnedPool* pool = nullptr;
  // The rank's residency book, in which the states register their sub-groups (with `pool`).
  memory::Residency* book = nullptr;
};

// The memory the states take, from their options and the partition's cut alone: what their
// constructor reserves and what `strata estimate` prints (engine/memory_estimate.cpp), so that
// the two cannot drift apart. Each sub-group's extent is [params | moments...], each region
// padded to 4 KiB.
struct OptimizerStatesPlan {
  std::vector<Range> sub_groups;
  // Per sub-group: the bytes of its master region and of each moment region (4 KiB multiples),
  // and of its extent (the master region and `moments` moment regions).
  std::vector<std::int64_t> master_region_bytes;
  std::vector<std::int64_t> moment_region_bytes;
  std::vector<std::int64_t> extent_bytes;
  std::int64_t total_extent_bytes = 0;
  std::int64_t largest_extent_bytes = 0;
  std::int64_t largest_sub_group = 0;  // elements
  // The shelf the states reserve in the pool: on cpu one resident buffer holding every extent,
  // on nvme buffer_count swap buffers of the largest extent (at least 4 KiB each).
  std::int64_t shelf_buffers = 0;
  std::int64_t shelf_buffer_bytes = 0;

  // One slot of the rollback window: a sub-group's prior states (the largest extent) and its
  // new parameters (the largest sub-group, `param_bytes_per_element` each, 4 KiB padded).
  std::int64_t rollback_slot_bytes(std::int64_t param_bytes_per_element) const;
};

// The plan of a partition of `partition_numel` elements whose optimizer keeps `moments` states
// beside the master (2 for Adam, 1 for Adagrad and Lion), as `options` asks. Pure: the options
// must have been accepted (check_optimizer_offload_options).
OptimizerStatesPlan plan_optimizer_states(const OptimizerOffloadOptions& options,
                                          std::int64_t partition_numel, int moments);
// Throws UserError for a refused configuration (device none, buffer_count < 1,
// sub_group_size < 1 without a cut given).
void check_optimizer_offload_options(const OptimizerOffloadOptions& options);

// A rank's optimizer states (fp32 master params and the optimizer's fp32 states, or bf16 ones as
// StateTypes says) in the CPU or NVMe tier, laid out per sub-group as OptimizerStatesPlan says,
// and their streaming for checkpoints. OptimizerOffload steps them.
//
// A failed transfer (aio::IoError, ChecksumError) marks the states inconsistent, and every later
// call throws a UserError naming that first failure and saying that training cannot continue
// from it (the Engine adds where the run can be resumed from).
class OptimizerStates {
 public:
  // The states of a partition of `partition_numel` elements, with no values yet: fill_states
  // gives them theirs (start-up, a checkpoint's load) before the first step. options.pool and
  // options.book are required, options.store too on nvme. Throws UserError for a refused
  // configuration and the store's and pool's refusals (nvme_path, free space).
  OptimizerStates(const Optimizer& optimizer, std::int64_t partition_numel,
                  const OptimizerOffloadOptions& options);
  OptimizerStates(const OptimizerStates&) = delete;
  OptimizerStates& operator=(const OptimizerStates&) = delete;
  // Once the pool is open: on cpu takes the states' memory from their shelf and registers each
  // sub-group in the book. Before any other call.
  void open();

  // One sub-group's states: its range of the partition and its fp32 regions (empty for a state
  // the optimizer does not keep: exp_avg for Adagrad, exp_avg_sq for Lion).
  struct SubGroupStates {
    Range range;
    std::span<float> params, exp_avg, exp_avg_sq;
  };
  using StatesVisitor = std::function<void(const SubGroupStates&)>;

  // Copies the fp32 masters and states out (tests); empty spans are skipped.
  void read_states(std::span<float> params, std::span<float> exp_avg, std::span<float> exp_avg_sq);
  // Hands every sub-group's states, as fp32 (bf16 ones widened, exactly), to `visit`, in
  // partition order (a checkpoint's save). On NVMe they come through the pool's buffers, read
  // ahead while `visit` runs on the one before, so memory holds buffer_count sub-groups whatever
  // the partition's size.
  void visit_states(const StatesVisitor& visit);
  // Hands every sub-group's states, as fp32, to `fill`, in partition order, and makes what it
  // wrote the optimizer's states (start-up, a checkpoint's load); `fill` writes every element
  // (their prior contents are undefined). bf16 states are filled through fp32 scratch and
  // rounded. On NVMe each is written back while `fill` runs on the next, through the pool's
  // buffers. A failed write leaves the states inconsistent (every later call refuses).
  void fill_states(const StatesVisitor& fill);
  // fill_states, later (a checkpoint's load on NVMe): on NVMe each sub-group is filled by the
  // next OptimizerOffload::step as its optimizer reaches it, so the states go to the swap file
  // once, stepped, instead of being written now and read back by that step; any other call that
  // needs them (visit_states, read_states, step_sub_groups) fills them all first. `fill` is
  // called in partition order, the sub-groups' fp32 masters included, and must stay callable
  // until then; `finished` runs once the last sub-group is filled (the load checks its CRC32Cs)
  // and may throw. A throw of either fails that call and leaves the states inconsistent (they
  // are partly the source's). On CPU the states are filled now. A later fill_states replaces a
  // pending one.
  void fill_states_later(StatesVisitor fill, std::function<void()> finished);
  bool fills_later() const noexcept { return static_cast<bool>(later_fill_); }
  // A pending fill_states_later, done now (every call but a whole step that needs the states).
  void fill_pending();
  // The pending fill_states_later's source and end, taken by a step that fills as it goes.
  std::pair<StatesVisitor, std::function<void()>> take_later_fill();

  // The NVMe loop of fill_states: each sub-group filled into a pool buffer, then handed to
  // `then` (a step, or nothing), then written back while the next is filled; on CPU filled in
  // place. Its errors are the caller's to turn into fail().
  using FilledSubGroup = std::function<void(int sub_group, std::span<std::byte> bytes)>;
  void fill_and_write(const StatesVisitor& fill, const FilledSubGroup& then);

  // A sub-group's arrays in its extent, each range.size() elements of its StateTypes type.
  struct Regions {
    std::span<std::byte> params, exp_avg, exp_avg_sq;
  };
  Regions regions(int sub_group, std::span<std::byte> bytes) const;
  // The sub-group's states as fp32 for a checkpoint: its extent itself when the states are fp32,
  // else widened into `scratch` (states_scratch()).
  SubGroupStates states_of(int sub_group, std::span<std::byte> bytes,
                           std::span<float> scratch) const;
  // 3 x the largest sub-group's fp32 elements when a state is bf16, else nothing.
  aio::AlignedBuffer states_scratch() const;

  std::int64_t partition_numel() const noexcept { return numel_; }
  const std::vector<Range>& sub_groups() const noexcept { return plan_.sub_groups; }
  const Range& range_of(int sub_group) const {
    return plan_.sub_groups[static_cast<std::size_t>(sub_group)];
  }
  const OptimizerStatesPlan& plan() const noexcept { return plan_; }
  const StateTypes& types() const noexcept { return types_; }
  memory::PartitionId partition(int sub_group) const { return partitions_[sub_group]; }

  bool inconsistent() const noexcept { return failure_.failed(); }
  // Throws the UserError naming the first failure once inconsistent.
  void check() const { failure_.check(); }
  // Marks the states inconsistent with `error` (which happened while `doing`; an earlier cause
  // stands) and returns the UserError to throw.
  UserError fail(const std::exception& error, const std::string& doing);
  // Marks the states inconsistent for a step that stopped half done outside this class (an
  // overlapped step whose backward failed after it had stepped sub-groups it cannot put back):
  // every later call refuses, naming `cause`. The first cause stands.
  void mark_inconsistent(const std::string& cause);

  memory::Residency& book() const noexcept { return *book_; }
  // The states' own counters in the book.
  memory::ResidencyCounters counters() const { return book_->counters(user_); }
  // The swap buffer pool (nvme only; null on cpu) and the states' shelf in it.
  memory::PinnedPool* pool() const noexcept { return store_ ? pool_ : nullptr; }
  memory::PinnedPool::Shelf shelf() const noexcept { return shelf_; }
  const memory::NvmeStore* store() const noexcept { return store_; }
  // Bytes of the swap file the states take (0 on cpu).
  std::int64_t nvme_bytes() const {
    return store_ ? store_->planned_bytes(first_extent_, partitions_.size()) : 0;
  }

 private:
  void reserve_memory(const OptimizerOffloadOptions& options);
  // Rounds what a fill wrote into `scratch` (states_of's) into the extent (bf16 states only).
  void narrow_into(int sub_group, const SubGroupStates& states, std::span<std::byte> bytes) const;
  // Zeroes the padding after each region of the extent.
  void zero_padding(int sub_group, std::span<std::byte> bytes) const;
  void visit_from_nvme(const StatesVisitor& visit, std::span<float> scratch);
  void write_from_pool(const FilledSubGroup& filled);

  std::int64_t numel_;
  StateTypes types_;
  bool has_exp_avg_;
  bool has_exp_avg_sq_;
  OptimizerStatesPlan plan_;
  memory::PinnedPool* pool_ = nullptr;
  memory::PinnedPool::Shelf shelf_ = -1;  // nvme: the states' swap buffers in pool_
  // cpu: every sub-group's extent, back to back (a resident shelf's one buffer, from open() on).
  memory::PinnedPool::Shelf cpu_shelf_ = -1;
  memory::PinnedPool::Lease cpu_states_;
  memory::NvmeStore* store_ = nullptr;  // nvme only
  int first_extent_ = 0;                // the states' extents in store_
  memory::Residency* book_ = nullptr;
  memory::User user_ = -1;                         // the states' partitions in book_
  base::ByIndex<memory::PartitionId> partitions_;  // per sub-group
  // The first error, once inconsistent; LateSubGroups' thread may latch it while the engine's
  // thread asks.
  base::FailureLatch failure_{
      "the optimizer state is inconsistent since an earlier step failed "
      "({}); training cannot continue from this state",
      "training cannot continue from this state"};
  // fill_states_later's source and its end, until a step or fill_pending takes them.
  StatesVisitor later_fill_;
  std::function<void()> later_finished_;
};

// Fills `states` with the fp32 master parameters `master_params` (the whole partition) and zero
// moments (tests, benchmarks).
void fill_with_masters(OptimizerStates& states, std::span<const float> master_params);

}  // namespace strata::engine::zero
