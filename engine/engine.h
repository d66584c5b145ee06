#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "aio/fault_plan.h"
#include "engine/config/config.h"
#include "engine/model.h"
#include "engine/optimizer.h"
#include "engine/step_traffic.h"
#include "engine/zero/flat_layout.h"
#include "gpu/device.h"

namespace strata::gpu {
class Comm;
class Ops;
}  // namespace strata::gpu

namespace strata::engine::memory {
class NvmeStore;
class PinnedPool;
class Residency;
class StreamOrderedMemory;
}  // namespace strata::engine::memory

namespace strata::engine::optim {
class LossScaler;
class LrSchedule;
}  // namespace strata::engine::optim

namespace strata::engine::zero {
class GradReducer;
class ParamCoordinator;
class ParamTier;
}  // namespace strata::engine::zero

namespace strata::engine {

class Checkpointer;
class ModulePass;
class OptimizerStep;
class StepLoss;
class StepMeter;
struct RunRecord;

// Seeded I/O faults (aio/fault_plan.h) for tests that drive the whole engine through failing
// disks: `swap` in every NVMe swap file's aio engine, `checkpoint` in the aio engine of each save
// and load. Off unless a test plants them.
struct IoFaults {
  aio::FaultPlan swap;
  aio::FaultPlan checkpoint;
};

// What the engine runs on: the device, its ops and the collectives between ranks.
struct Runtime {
  gpu::Device& device;
  gpu::Ops& ops;
  gpu::Comm& comm;
  IoFaults faults = {};
};

// One optimizer step, for the progress line and the metrics file.
struct StepStats {
  std::int64_t step = 0;  // optimizer steps taken so far, this one included
  // The mean over the step's targets in the loss, on every micro-batch and rank (a negative target
  // is not in it: engine/loss_tokens.h); 0 for a step with none, which has no gradient either.
  double loss = 0;
  double lr = 0;          // the learning rate this step used
  double grad_norm = 0;   // global L2 norm of the (unscaled) gradients, before clipping
  double loss_scale = 1;  // fp16's loss scale this step used (1 otherwise)
  bool skipped = false;   // fp16 overflow: no update, the scale was lowered
  // strata.overlap_optimizer: sub-groups stepped while backward ran, and how many of those were
  // put back and redone (clipped or skipped step).
  std::int64_t early_sub_groups = 0;
  std::int64_t undone_sub_groups = 0;
  // Offloaded optimizer: the sub-groups left stepping beside the next call's forward.
  std::int64_t late_sub_groups = 0;
  // Device allocations that waited for the device: only when the budget refused fresh memory
  // while released buffers were still held, never once per module.
  std::int64_t allocation_waits = 0;
  // Device allocations the step made (0 once the step's memory is reserved up front).
  std::int64_t device_allocations = 0;
  // Wall time of the step, with what a call since the step before (an evaluation, a save) waited
  // for that step's optimizer.
  double seconds = 0;
  std::int64_t tokens = 0;  // tokens processed by all ranks
  // Of their targets, those in the loss (N, all of them without a mask; 0: the loss is 0 and
  // the step had no gradient).
  std::int64_t loss_tokens = 0;
  // Bytes moved by stream copies and NVMe (engine/step_traffic.h): the step's own, and those of
  // the optimizer step that finished during it: its own when it ran before returning, the step
  // before's when that one's offloaded optimizer ran on beside this step's forward (every
  // offloaded step but one that saves a planned checkpoint or fills loaded states). Two runs of
  // the same job count the same bytes in every step.
  gpu::TransferCounters transfers;
  std::int64_t bytes_nvme_read = 0;
  std::int64_t bytes_nvme_write = 0;
  std::int64_t gpu_peak_bytes = 0;  // device memory peak during the step
  std::int64_t cpu_peak_bytes = 0;  // pinned host memory held during the step
};

// One evaluation (Engine::evaluate_batch), for combining batches into the mean over a split.
struct EvalStats {
  // The mean over the batch's targets in the loss, on every rank (0 when none is).
  double loss = 0;
  std::int64_t loss_tokens = 0;  // those targets, over every rank
  std::int64_t tokens = 0;       // every target, masked or not, over every rank
};

// What the engine holds in each tier, for `strata estimate`'s check and the summary.
struct MemoryUse {
  std::int64_t device_peak_bytes = 0;  // the highest device memory in use during any step so far
  std::int64_t cpu_bytes = 0;          // CPU memory held for the model states (tiers and pools)
  std::int64_t nvme_bytes = 0;         // this rank's swap files (parameters and optimizer states)
  // Of cpu_bytes, the rank's swap buffer pool: every shelf, page-locked or not (0 without NVMe).
  std::int64_t swap_buffer_bytes = 0;
};

// What a save or a load did, for the log line and the benchmark.
struct CheckpointInfo {
  std::filesystem::path path;  // the checkpoint directory, dir/<tag>
  std::int64_t step = 0;       // optimizer steps applied
  std::int64_t batches = 0;    // batches trained: the next batch is batches + 1
  std::int64_t bytes = 0;      // this rank's bytes written (save) or checked and read (load)
  double seconds = 0;
  int pruned = 0;  // older checkpoints removed after the save (keep_last)
  // The states go to or come from the checkpoint during a step's optimizer pass: a save the
  // step made (plan_checkpoint; `seconds` is then what the save took outside that step), or a
  // load on NVMe that read the masters for the parameters and leaves the optimizer's states to
  // the first step (`bytes` and `seconds` are then the masters'; their CRC32Cs are checked at
  // the end of that step's optimizer pass).
  bool during_step = false;
};

// Trains a Model with the config's batch, precision, optimizer, scheduler and ZeRO settings
// (docs/architecture.md, "One training step"): train_batch reads as its phases, forward,
// backward, reduce, step.
class Engine {
 public:
  // Lays out and initialises the parameters (seeded by strata.seed, the same values for any
  // layout or world size), allocates activations and optimizer state. Throws UserError when the
  // model does not fit the device budget, naming the config key to change.
  Engine(Runtime& runtime, const Config& config, Model& model);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // One optimizer step over gradient_accumulation_steps micro-batches. `inputs` and `targets`
  // hold this rank's micro-batches back to back (gradient_accumulation_steps *
  // model.tokens_per_micro_batch() tokens each). A negative target is not in the loss: the step
  // minimises the mean over the step's other targets on every micro-batch and rank
  // (engine/loss_tokens.h); with several ranks it starts with one all-reduce of their count.
  StepStats train_batch(std::span<const std::int32_t> inputs,
                        std::span<const std::int32_t> targets);
  // The mean loss of forward passes over `inputs` (whole micro-batches), without any update:
  // over the targets in the loss (a negative target is not: engine/loss_tokens.h) of every rank.
  // Collective when there are several ranks. With no target masked it is the mean of each
  // micro-batch's mean, averaged over ranks, as it always was.
  double evaluate(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets);
  // The same with the counts that weigh it against other batches (strata eval).
  EvalStats evaluate_batch(std::span<const std::int32_t> inputs,
                           std::span<const std::int32_t> targets);
  // One forward over one micro-batch of `inputs` (tokens_per_micro_batch() tokens; no loss, no
  // update) and the logits at each of `rows` (token indices into the micro-batch) widened to fp32:
  // rows.size() x the model's vocab() values. The model is causal, so a row's logits depend only
  // on the tokens up to it in its sequence. Each row is computed alone (gpu::Ops::set_rows_alone),
  // as in cached_logits: on the host a decode step's logits are these to the bit. Collective when
  // there are several ranks.
  std::vector<float> logits_at(std::span<const std::int32_t> inputs,
                               std::span<const std::int64_t> rows);
  // Generation with a KV cache (models/generate/): a cache of `max_seq` positions (at most the
  // model's seq_len) for each sequence of the micro-batch, in the compute type, inside the
  // device's budget like every other allocation; a cache of another length replaces it. Throws
  // UserError naming its bytes and what the device has left when it does not fit.
  void reserve_cache(std::int64_t max_seq);
  // What reserve_cache takes on the device for `sequences` sequences of `model` (the micro-batch
  // it was planned for): its KV cache and one row of fp32 logits per sequence. strata estimate's
  // kv_cache term.
  static std::int64_t cache_reservation_bytes(const Model& model, std::int64_t sequences,
                                              std::int64_t max_seq, gpu::DataType compute);
  // One pass of generation (Model::load_cached: `tokens` new tokens of each sequence of the
  // micro-batch from position start[b], kept in the cache) and the logits at each of `rows`
  // (indices into the pass's batch x tokens rows), as logits_at gives them. Collective when there
  // are several ranks.
  std::vector<float> cached_logits(std::span<const std::int32_t> inputs, std::int64_t tokens,
                                   std::span<const std::int32_t> start,
                                   std::span<const std::int64_t> rows);

  // Saves everything the run needs to continue into `dir`/`tag` (docs/checkpoints.md):
  // collective, every rank calls it with the same arguments. The checkpoint appears whole or not
  // at all, `dir`/latest then names it, and checkpoints beyond checkpoint.keep_last are pruned.
  // Throws UserError naming the file and the fix for a disk error; the run can go on after one.
  CheckpointInfo save_checkpoint(const std::filesystem::path& dir, const std::string& tag);
  // Asks the next train_batch to save into `dir`/`tag` as its optimizer steps the states;
  // save_checkpoint with the same arguments, right after that train_batch, finishes the save.
  // Collective. With the optimizer states on NVMe the step writes each sub-group to the
  // checkpoint from the swap buffer it was stepped in, so the save costs its writes alone, not
  // a second read of every state from swap. Without states on NVMe, with
  // strata.overlap_optimizer, or when that step is skipped (fp16 overflow), nothing is planned
  // and save_checkpoint saves as usual. A disk error of the checkpoint does not stop the step:
  // save_checkpoint reports it.
  void plan_checkpoint(const std::filesystem::path& dir, const std::string& tag);
  // Continues from a checkpoint saved at any stage, offload and world size: `dir`/`tag`, or with
  // no tag the checkpoint `dir`/latest names (`dir` may also be a checkpoint directory itself).
  // Collective. Refuses,
  // before changing anything, a checkpoint of another model or optimizer, or one whose files are
  // missing, truncated or fail their CRC32C, naming the file (and tensor) and the fix. An error
  // part way through the copy (a disk failing) leaves the engine refusing every later call.
  // With the optimizer states on NVMe only the masters are read here (for the parameters); the
  // first step reads the optimizer's states from the checkpoint where it would read them from
  // swap, and a read error or CRC32C mismatch there fails that step, naming the file, and
  // leaves the engine refusing every later call (CheckpointInfo::during_step).
  CheckpointInfo load_checkpoint(const std::filesystem::path& dir, const std::string& tag = "");

  const zero::FlatLayout& layout() const;
  MemoryUse memory_use() const;
  // The rank's offload memory (docs/memory.md), read-only: its one pool (null when nothing is
  // offloaded), its one residency book, and its swap stores (the rank's one store, then the
  // parameters' second one under another nvme_path; empty without NVMe).
  const memory::PinnedPool* host_pool() const;
  const memory::Residency& residency() const;
  std::vector<const memory::NvmeStore*> swap_stores() const;
  std::int64_t steps_taken() const;
  // Batches trained so far (the data position), skipped steps included; a loaded checkpoint's.
  std::int64_t batches_trained() const;
  // The fp32 master value of every parameter, in all_tensors() order, for tests and exports.
  std::vector<float> master_parameters();

 private:
  // Construction, in the order the components depend on each other (engine_build.cpp).
  void build();
  void build_offload_memory(const std::vector<zero::Range>& sub_groups);
  void build_optimizer_step(std::vector<zero::Range> sub_groups);
  void build_reducer();
  void build_coordinator();
  void open_offload_memory();
  void reserve_step_memory();

  // The step (engine.cpp), in the order train_batch calls them.
  // Runs `enqueue` (a forward with no update); when it throws, the work it enqueued is waited for
  // before the exception leaves, as that work may read host memory the unwinding frees.
  void forward_only(const std::function<void()>& enqueue);
  // The device buffer read_logits widens `rows` rows of logits into, grown before any forward
  // is enqueued, so that no allocation can fail between a forward and its read.
  void hold_logits(std::int64_t rows);
  // The last forward's logits at each of `rows`, widened to fp32 and brought to the host.
  std::vector<float> read_logits(std::span<const std::int64_t> rows);
  void load_micro_batch(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets,
                        std::int64_t micro_batch);
  void run_forward(std::int64_t micro_batch, bool training);
  void run_backward(std::int64_t micro_batch, bool last_micro);
  StepHyperparameters hyperparameters(float grad_scale) const;
  StepHyperparameters guess_step() const;
  StepHyperparameters plan_step(StepStats& stats);
  Traffic step_optimizer(StepStats& stats);
  void wait_for_streams();
  // The fates of a failed step (engine_faults.cpp).
  [[noreturn]] void fail_step(std::exception_ptr failure);
  bool abandon_step(const std::string& failure) noexcept;
  void drain_streams() noexcept;
  bool inconsistent() const;
  void settle_late_sub_groups();
  void settle_step();
  // What the step moved and holds (engine_traffic.cpp).
  TrafficReading read_traffic() const;
  std::int64_t nvme_read_bytes() const;
  std::int64_t nvme_write_bytes() const;
  std::int64_t host_bytes() const;
  int shard_rank() const;
  gpu::Stream& stream() const;

  Runtime& runtime_;
  Config config_;
  Model& model_;
  zero::FlatLayout layout_;
  std::unique_ptr<Optimizer> optimizer_math_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::unique_ptr<optim::LossScaler> loss_scaler_;
  ParamCopy copy_type_;
  std::unique_ptr<memory::StreamOrderedMemory> memory_;
  // The rank's one residency book and, when anything is offloaded (cpu or nvme), its one pool:
  // the tier, the offloaded optimizer and the reducer reserve their shelves in the pool and
  // register their partitions in the book. With anything on NVMe, the rank's one swap store, in
  // which they reserve their extents, and a second one under offload_param.nvme_path when that
  // is another directory; each store's rings register the part of the pool's page-locked arena
  // it reads into. Declared first: they outlive their clients (the pool before the stores).
  std::unique_ptr<memory::Residency> book_;
  std::unique_ptr<memory::PinnedPool> pool_;
  std::unique_ptr<memory::NvmeStore> swap_;
  std::unique_ptr<memory::NvmeStore> param_swap_;
  std::unique_ptr<zero::ParamTier> tier_;
  std::unique_ptr<zero::ParamCoordinator> coordinator_;
  std::unique_ptr<zero::GradReducer> reducer_;
  std::unique_ptr<ModulePass> pass_;  // the module calls of a micro-batch, over the two above
  std::unique_ptr<OptimizerStep> optimizer_;
  std::unique_ptr<StepLoss> loss_;
  std::unique_ptr<RunRecord> record_;
  std::unique_ptr<StepMeter> meter_;
  std::unique_ptr<Checkpointer> checkpoints_;
  gpu::DeviceBuffer logits_;          // logits_at's fp32 rows on the device, grown as asked
  std::int64_t cache_positions_ = 0;  // reserve_cache's max_seq; 0: no cache
  // Device memory a step allocates beyond the engine's holdings when its arena could not be
  // reserved (reserve_step_memory): what a KV cache must leave free.
  std::int64_t step_room_ = 0;
};

}  // namespace strata::engine
