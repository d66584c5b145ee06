#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aio/aligned_buffer.h"
#include "base/error.h"
#include "base/failure_latch.h"
#include "engine/config/config.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/optimizer.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/step_io.h"
#include "gpu/device.h"

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
  // nvme: nvme_path, job, rank, aio options (and fault injection for tests).
  memory::NvmeStoreOptions nvme;
  // nvme: the rank's swap store, not yet open, in which the states reserve their extents (the
  // engine's one store); null: a store of their own, opened with `nvme` (tests, benchmarks).
  memory::NvmeStore* store = nullptr;
  // The rank's pool, not yet open, in which the states reserve their shelf: on cpu the states
  // themselves, on nvme buffer_count buffers of the largest sub-group's extent; the engine then
  // opens it and calls open(). Null: a pool of their own, opened at once, and a book of their
  // own below (tests, benchmarks).
  memory::PinnedPool* pool = nullptr;
  // The rank's residency book, in which the states register their sub-groups (with `pool`).
  memory::Residency* book = nullptr;
};

// The step's third stage (docs/architecture.md, "One training step", 3): a rank's optimizer
// states (fp32 master params and the optimizer's fp32 states) live in the CPU or NVMe tier, laid
// out per sub-group as [params | exp_avg | exp_avg_sq] (each region padded to 4 KiB); step() runs
// the optimizer sub-group by sub-group from a fp32 gradient partition. On NVMe, with
// pipeline_read the next sub-groups are read while the optimizer runs on the current one, with
// pipeline_write finished ones are written while the next runs, without them it is strictly
// read, compute, write; at most buffer_count sub-groups are in flight (one pool buffer each).
//
// With strata.overlap_optimizer the engine steps sub-groups one by one as their gradients become
// final during backward (step_sub_groups), before it knows whether clipping or an overflow will
// change the step; it keeps each such sub-group's prior value and, when the guess was wrong,
// undo_kept() restores and redoes them.
//
// A failed transfer (aio::IoError, ChecksumError) stops the step, marks the state inconsistent,
// and every later call throws a UserError naming that first failure and saying that training
// cannot continue from it (the Engine adds where the run can be resumed from).
class OptimizerOffload {
 public:
  // The states of a partition of `partition_numel` elements, with no values yet: fill_states
  // gives them theirs (start-up, a checkpoint's load) before the first step. Throws UserError
  // for a refused configuration (device none, buffer_count < 1, sub_group_size < 1), and the
  // store's and pool's refusals (nvme_path, free space, RLIMIT_MEMLOCK).
  OptimizerOffload(gpu::Device& device, const Optimizer& optimizer, std::int64_t partition_numel,
                   OptimizerOffloadOptions options);
  // The same, filled with the fp32 master parameters `master_params` and zero states (tests,
  // benchmarks: a whole partition in memory).
  OptimizerOffload(gpu::Device& device, const Optimizer& optimizer,
                   std::span<const float> master_params, OptimizerOffloadOptions options);
  ~OptimizerOffload();
  // Once the engine's pool is open: on cpu takes the states' memory from their shelf and
  // registers each sub-group in the book. Before any other call; done by the constructor when the
  // states made their own pool.
  void open();
  OptimizerOffload(const OptimizerOffload&) = delete;
  OptimizerOffload& operator=(const OptimizerOffload&) = delete;

  // One sub-group's states: its range of the partition and its fp32 regions (empty for a state
  // the optimizer does not keep: exp_avg for Adagrad, exp_avg_sq for Lion).
  struct SubGroupStates {
    Range range;
    std::span<float> params, exp_avg, exp_avg_sq;
  };
  using StatesVisitor = std::function<void(const SubGroupStates&)>;

  // One optimizer step over the whole partition, sub-group by sub-group; each one's new
  // parameters go to io.params as soon as it is stepped. `stepped` (optional) sees each
  // sub-group's new states, as visit_states hands them, in partition order, while they are
  // still in memory (on NVMe: in the pool buffer, before it is written back), which is how a
  // checkpoint is saved within the step (Engine::plan_checkpoint). It must not throw: a throw
  // fails the step like a swap error.
  void step(const StepHyperparameters& hyper, const StepIo& io, const StatesVisitor& stepped = {});
  // The same with the new parameters written to `copy` (the whole partition, as `copy_type` bit
  // patterns; empty with none) (tests, benchmarks).
  void step(const StepHyperparameters& hyper, std::span<const float> grads, ParamCopy copy_type,
            std::span<std::uint16_t> copy);

  // Steps the sub-groups of `order`, in that order, each once `ready(g)` has returned true; a
  // false stops there, leaving the rest (on NVMe the states read ahead are dropped: a failure).
  // Once `winding_down()` (optional) returns true no further sub-group is begun, but those whose
  // states are already being read are stepped: no read is wasted, so the bytes a whole step moves
  // do not depend on where the stop came. Returns how many were stepped. With `keep_prior`, the
  // states each had before are kept for undo_kept(), and its new parameters wait beside them
  // for commit_kept() instead of going to io.params (so this may run on another thread than the
  // engine's: it never calls the sink); at most keep_capacity of them over all calls until
  // undo_kept or commit_kept. Without, each one's new parameters go to io.params as in step(),
  // from the calling thread. Never runs beside the other calls.
  using Ready = std::function<bool(int sub_group)>;
  using WindingDown = std::function<bool()>;
  int step_sub_groups(const StepHyperparameters& hyper, const StepIo& io,
                      std::span<const int> order, const Ready& ready, bool keep_prior,
                      const WindingDown& winding_down = {});
  // Puts every kept sub-group's states back to their prior value and, when `redo` is not null,
  // steps it again with *redo (its new parameters going to io.params). Then forgets them. Their
  // parameters in io.params were never changed, so without a redo they are the prior ones.
  void undo_kept(const StepHyperparameters* redo, const StepIo& io);
  // The kept sub-groups' step stands: their new parameters go to io.params, and they are
  // forgotten.
  void commit_kept(const StepIo& io);
  std::span<const int> kept() const noexcept { return kept_; }
  // CPU memory of the rollback window (keep_capacity slots).
  std::int64_t rollback_bytes() const noexcept {
    return kept_states_.size_bytes() + kept_params_.size_bytes();
  }

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
  // next step() as its optimizer reaches it, so the states go to the swap file once, stepped,
  // instead of being written now and read back by that step; any other call that needs them
  // (visit_states, read_states, step_sub_groups) fills them all first. `fill` is called in
  // partition order, the sub-groups' fp32 masters included, and must stay callable until then;
  // `finished` runs once the last sub-group is filled (the load checks its CRC32Cs) and may
  // throw. A throw of either fails that call and leaves the states inconsistent (they are partly
  // the source's). On CPU the states are filled now. A later fill_states replaces a pending one.
  void fill_states_later(StatesVisitor fill, std::function<void()> finished);
  bool fills_later() const noexcept { return static_cast<bool>(later_fill_); }

  std::int64_t partition_numel() const noexcept { return numel_; }
  const std::vector<Range>& sub_groups() const noexcept { return sub_groups_; }
  bool inconsistent() const noexcept { return failure_.failed(); }
  // Marks the states inconsistent for a step that stopped half done outside this class (an
  // overlapped step whose backward failed after it had stepped sub-groups it cannot put back):
  // every later call refuses, naming `cause`. The first cause stands.
  void mark_inconsistent(const std::string& cause);
  // The states' own counters in the book.
  memory::ResidencyCounters counters() const { return book_->counters(user_); }
  // The swap buffer pool (nvme only; null on cpu) and the states' shelf in it.
  const memory::PinnedPool* pool() const noexcept { return store_ ? pool_ : nullptr; }
  memory::PinnedPool::Shelf shelf() const noexcept { return shelf_; }
  const memory::NvmeStore* store() const noexcept { return store_; }
  // Bytes of the swap file the states take (0 on cpu).
  std::int64_t nvme_bytes() const {
    return store_ ? store_->planned_bytes(first_extent_, static_cast<int>(partitions_.size())) : 0;
  }
  // Most sub-groups in flight at once during the last step (nvme), for tests of buffer_count.
  std::int64_t peak_in_flight() const noexcept { return peak_in_flight_; }

 private:
  // A sub-group's arrays in its extent, each range.size() elements of its StateTypes type.
  struct Regions {
    std::span<std::byte> params, exp_avg, exp_avg_sq;
  };
  Regions regions(int sub_group, std::span<std::byte> bytes) const;
  // The sub-group's states as fp32 for a checkpoint: its extent itself when the states are fp32,
  // else widened into `scratch` (3 x the largest sub-group's fp32 elements).
  SubGroupStates states_of(int sub_group, std::span<std::byte> bytes,
                           std::span<float> scratch) const;
  // Rounds what a fill wrote into `scratch` (states_of's) into the extent (bf16 states only).
  void narrow_into(int sub_group, const SubGroupStates& states, std::span<std::byte> bytes) const;
  // Zeroes the padding after each region of the extent.
  void zero_padding(int sub_group, std::span<std::byte> bytes) const;
  aio::AlignedBuffer states_scratch() const;
  // The NVMe loop of fill_states: each sub-group filled into a pool buffer, then handed to
  // `then` (a step, or nothing), then written back while the next is filled. Its errors are
  // the caller's to turn into fail().
  using FilledSubGroup = std::function<void(int sub_group, std::span<std::byte> bytes)>;
  void fill_and_write(const StatesVisitor& fill, const FilledSubGroup& then);
  // A pending fill_states_later, done now (every call but step() that needs the states).
  void fill_pending();
  // Marks the state inconsistent with `error` (which happened while `doing`; an earlier cause
  // stands) and returns the UserError to throw.
  UserError fail(const std::exception& error, const std::string& doing);
  // When step_sub_groups' sub-groups may be stepped (step(): at once, all of them).
  struct Pace {
    Ready ready;
    WindingDown winding_down;
  };
  int run_step(const StepHyperparameters& hyper, const StepIo& io, std::span<const int> order,
               const Pace& pace, bool keep_prior, const StatesVisitor& stepped);
  // Steps sub-group `sub_group` (its states in `bytes`), writing its new parameters to
  // `new_params` (range.size() elements of the storage type; empty: nowhere).
  void compute(int sub_group, std::span<std::byte> bytes, const StepHyperparameters& hyper,
               const StepIo& io, std::span<std::byte> new_params);
  // compute() with the new parameters handed to io.params.
  void compute_into_sink(int sub_group, std::span<std::byte> bytes,
                         const StepHyperparameters& hyper, const StepIo& io);
  // Keeps the sub-group's states before its step in the next slot; returns the slot.
  std::size_t keep(int sub_group, std::span<const std::byte> bytes);
  std::span<std::byte> kept_new_params(std::size_t slot, int sub_group);
  std::span<std::byte> kept_states(std::size_t slot);

  const Optimizer& optimizer_;
  OptimizerOffloadOptions options_;
  std::int64_t numel_;
  std::vector<Range> sub_groups_;
  // Per sub-group: the bytes of its master region and of each moment region, 4 KiB multiples.
  std::vector<std::int64_t> master_region_bytes_;
  std::vector<std::int64_t> moment_region_bytes_;
  bool has_exp_avg_;
  bool has_exp_avg_sq_;
  // States made without the engine's memory (tests, benchmarks) own their pool (before the
  // store: the store's rings register it), store and book.
  std::unique_ptr<memory::PinnedPool> own_pool_;
  std::unique_ptr<memory::NvmeStore> own_store_;
  std::unique_ptr<memory::Residency> own_book_;
  memory::PinnedPool* pool_ = nullptr;    // own_pool_ or the engine's
  memory::PinnedPool::Shelf shelf_ = -1;  // nvme: the states' swap buffers in pool_
  // cpu: every sub-group's extent, back to back (a resident shelf's one buffer, from open() on).
  memory::PinnedPool::Shelf cpu_shelf_ = -1;
  memory::PinnedPool::Lease cpu_states_;
  std::vector<std::int64_t> extent_bytes_;       // per sub-group
  memory::NvmeStore* store_ = nullptr;           // own_store_ or the engine's
  int first_extent_ = 0;                         // the states' extents in store_
  memory::Residency* book_ = nullptr;            // own_book_ or the engine's
  memory::User user_ = -1;                       // the states' partitions in book_
  std::vector<memory::PartitionId> partitions_;  // per sub-group
  // The first error, once inconsistent; LateSubGroups' thread may latch it while the engine's
  // thread asks.
  base::FailureLatch failure_{
      "the optimizer state is inconsistent since an earlier step failed "
      "({}); training cannot continue from this state",
      "training cannot continue from this state"};
  std::int64_t peak_in_flight_ = 0;
  // The rollback window: keep_capacity slots of one extent each (the prior states), and of one
  // sub-group's new parameters (keep_param_bytes_per_element); kept_[k] is the sub-group in slot k.
  std::int64_t kept_extent_bytes_ = 0;
  std::int64_t kept_param_bytes_ = 0;
  aio::AlignedBuffer kept_states_;
  aio::AlignedBuffer kept_params_;
  std::vector<int> kept_;
  // fill_states_later's source and its end, until a step or fill_pending takes them.
  StatesVisitor later_fill_;
  std::function<void()> later_finished_;
};

}  // namespace strata::engine::zero
