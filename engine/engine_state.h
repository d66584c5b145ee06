#pragma once

// The Engine's state (engine/engine.h), shared by the files that implement it: engine.cpp (the
// step) and engine_checkpoint.cpp (save and load). Not installed, not for other code.

#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aio/engine.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/shard_pieces.h"
#include "engine/checkpoint/shard_reader.h"
#include "engine/checkpoint/shard_writer.h"
#include "engine/checkpoint/state_stream.h"
#include "engine/engine.h"
#include "engine/loss_tokens.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/memory/stream_ordered_memory.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optimizer.h"
#include "engine/step_traffic.h"
#include "engine/zero/grad_reducer.h"
#include "engine/zero/late_sub_groups.h"
#include "engine/zero/optimizer_offload.h"
#include "engine/zero/overlapped_step.h"
#include "engine/zero/param_coordinator.h"
#include "engine/zero/param_tier.h"
#include "gpu/comm.h"
#include "gpu/stream.h"

namespace strata::engine {

// The device optimizer's states move between host and device (a checkpoint's save and load,
// start-up) in chunks of this many elements.
inline constexpr std::int64_t kDeviceStateChunk = std::int64_t{1} << 20;

// Every module's parameters, in module order.
std::vector<std::vector<ParamSpec>> declared_parameters(Model& model);
// The 16-bit copy the config asks for (bf16, fp16), or none for fp32.
ParamCopy storage_type(const Config& config);
gpu::DataType to_data_type(ParamCopy copy);
// `values` in the storage type of `copy` (fp32 as they are), at `out`.
void to_storage(ParamCopy copy, std::span<const float> values, std::byte* out);

// A checkpoint the next step saves while its optimizer steps the states (Engine::plan_checkpoint,
// engine_checkpoint.cpp): each sub-group goes to the checkpoint's files from the memory it was
// stepped in, so states on NVMe are not read from swap a second time for the save.
struct PlannedSave {
  // The save's own aio engine, as save_checkpoint's (the run's aio settings and the faults a
  // test planted for checkpoints).
  PlannedSave(std::filesystem::path dir_in, std::string tag_in, const Config& config,
              const aio::FaultPlan& faults);

  std::filesystem::path dir;
  std::string tag;  // as every rank agreed on it
  aio::Engine io;
  std::optional<checkpoint::ShardWriter> writer;  // on ranks that hold a shard
  // The step that may make it: the one that trains batch `batches` + 1 (batches_trained when
  // planned). Once it stepped every sub-group into the writer, `step` is its steps_taken.
  std::int64_t batches = 0;
  std::int64_t step = -1;
  // The checkpoint disk's error (the step itself goes on: its states are intact).
  std::exception_ptr failure;
  double plan_seconds = 0;  // plan_checkpoint's own time (the files created and allocated)

  // Writes one stepped sub-group; an error is kept for save_checkpoint and ends the writing.
  void write(const zero::OptimizerOffload::SubGroupStates& states) noexcept;
};

// One rank's share of ZeRO (docs/architecture.md, "One training step"): the parameter tier holds
// the rank's 16-bit shards, the coordinator gathers whole modules for compute, the reducer turns
// module gradients into the rank's fp32 gradient partition, and the optimizer (on the device, or
// offloaded to CPU/NVMe) updates the partition and writes the new shards back to the tier.
// Stage 0 is the same machinery over an unsharded layout with every module kept gathered.
struct Engine::State {
  State(Runtime& runtime_in, const Config& config_in, Model& model_in)
      : runtime(runtime_in),
        config(config_in),
        model(model_in),
        layout(declared_parameters(model_in),
               config_in.zero.stage == 0 ? 1 : runtime_in.comm.world_size()),
        optimizer(config_in.optimizer),
        schedule(config_in.scheduler, config_in.optimizer),
        loss_scaler(config_in.fp16),
        copy_type(storage_type(config_in)),
        storage(to_data_type(copy_type)),
        memory(runtime_in.device) {}

  Runtime& runtime;
  Config config;
  Model& model;
  zero::FlatLayout layout;
  Optimizer optimizer;
  optim::LrSchedule schedule;
  optim::LossScaler loss_scaler;
  ParamCopy copy_type;
  gpu::DataType storage;
  memory::StreamOrderedMemory memory;

  // The rank's one residency book and, when anything is offloaded (cpu or nvme), its one pool:
  // the tier, the offloaded optimizer and the reducer reserve their shelves in the pool (their
  // swap buffers and the memory they keep in CPU) and register their partitions in the book.
  // With anything on NVMe, the rank's one swap store, in which they reserve their extents, and
  // a second one under offload_param.nvme_path when that is another directory; each store's
  // rings register the part of the pool's page-locked arena it reads into. Declared first: they
  // outlive their clients (the pool before the stores, whose rings register its arena).
  memory::Residency book;
  std::unique_ptr<memory::PinnedPool> pool;
  std::unique_ptr<memory::NvmeStore> swap;
  std::unique_ptr<memory::NvmeStore> param_swap;
  std::unique_ptr<zero::ParamTier> tier;
  std::unique_ptr<zero::ParamCoordinator> coordinator;
  std::unique_ptr<zero::GradReducer> reducer;
  // The optimizer on the device (offload_optimizer none), stepped sub-group by sub-group ...
  std::vector<zero::Range> device_sub_groups;
  gpu::DeviceBuffer master;
  gpu::DeviceBuffer exp_avg;
  gpu::DeviceBuffer exp_avg_sq;
  // ... or offloaded to CPU memory or NVMe, its step overlapped with backward when asked.
  std::unique_ptr<zero::OptimizerOffload> offload;
  std::unique_ptr<zero::OverlappedStep> overlap;
  // The sub-groups a step leaves stepping beside the next forward (after overlap: it reads what
  // the states, the reducer and the tier hold, and goes first).
  std::unique_ptr<zero::LateSubGroups> late;

  // An int64 slot that carries this rank's count of loss tokens through their all-reduce, then
  // one float per micro-batch: its mean loss, or under a mask its loss sum (engine_loss.cpp),
  // reduced over ranks. The same layout on the host.
  gpu::DeviceBuffer losses;
  gpu::PinnedBuffer losses_host;
  // The step's (or the evaluation's) targets in the loss: per micro-batch of this rank, and in all.
  std::vector<std::int64_t> micro_loss_tokens;
  LossTokens loss_tokens;
  std::int64_t steps_taken = 0;      // optimizer steps applied
  std::int64_t batches_trained = 0;  // train_batch calls that finished, skipped steps included
  std::int64_t device_peak = 0;
  // Set when a checkpoint load failed part way: the states are neither the old nor the new ones,
  // and every later call refuses with this.
  std::string unusable;
  // The checkpoint this run last saved or loaded, for the resume advice of a failed step.
  std::filesystem::path last_checkpoint;
  // A checkpoint whose optimizer states the first step reads (load_checkpoint on NVMe), until
  // they are verified; empty when none.
  std::filesystem::path unverified_load;
  // The save plan_checkpoint asked the next step to make; null when none.
  std::unique_ptr<PlannedSave> planned_save;

  gpu::Stream& stream() { return runtime.device.compute_stream(); }
  int shard_rank() const { return layout.world_size() > 1 ? runtime.comm.rank() : 0; }

  void build();
  // Opens the pool and the stores once every client has reserved in them, then the clients.
  void open_offload_memory();
  std::int64_t overlap_window(const zero::OptimizerOffloadOptions& options) const;
  // Where each state's values come from, range by range in partition order: the seed's initial
  // values, or a checkpoint. `state` is one of state_names().
  using StateSource =
      std::function<void(const std::string& state, zero::Range range, std::span<float> out)>;
  void load_states(const StateSource& source);
  void initialise_states();
  // Reserves the step's device memory (its arena) when the budget has room for it.
  void reserve_step_memory();
  // `training`: a backward follows, so the loss's gradient may be written in the same pass.
  void run_forward(std::int64_t micro_batch, bool training);
  void run_backward(std::int64_t micro_batch, bool last_micro);

  // engine_loss.cpp: the loss over the targets in it (engine/loss_tokens.h).
  // The context of a micro-batch's forward and backward; `training`: a backward follows, and the
  // loss's gradient is seeded (loss_gradient, row_loss_gradient).
  StepContext step_context(std::int64_t micro_batch, bool training);
  // d(step objective) / d(a micro-batch's mean loss): loss_scale / gradient_accumulation_steps.
  float loss_gradient() const;
  static constexpr std::int64_t kLossTokenBytes = 8;
  float* device_losses() const { return losses.as<float>() + kLossTokenBytes / sizeof(float); }
  const float* host_losses() const {
    return losses_host.as<float>() + kLossTokenBytes / sizeof(float);
  }
  // Counts the unmasked targets of `micro_batches` micro-batches, and sums them over the ranks
  // when there are several: before the first forward, since every rank's backward needs N.
  void count_loss_tokens(std::span<const std::int32_t> targets, std::int64_t micro_batches);
  // StepContext::row_loss_gradient of a training step: set only when some target is masked.
  std::optional<float> row_loss_gradient() const;
  // After a micro-batch's forward: keeps its loss in its slot of `losses`.
  void keep_loss(std::int64_t micro_batch);
  // Reduces the slots over ranks (their mean, or under a mask their sum) and brings them down.
  void reduce_losses(std::int64_t count);
  // Once the slots are down: the loss of the step or evaluation.
  double reported_loss(std::int64_t count) const;
  StepHyperparameters hyperparameters(float grad_scale) const;
  StepHyperparameters guess_step() const;
  StepHyperparameters plan_step(StepStats& stats);
  zero::StepIo step_io();
  std::optional<std::vector<int>> apply_step(const StepHyperparameters& hyper);
  std::optional<std::vector<int>> finish_overlapped_step(const StepHyperparameters& hyper,
                                                         StepStats& stats);
  void start_late_sub_groups(const StepHyperparameters& hyper, std::vector<int> order);
  // Waits for the last step's sub-groups left stepping beside the next forward (the next
  // backward overwrites the gradients they read); their bytes count in this step. Rethrows their
  // failure.
  void settle_late_sub_groups();
  // The same before a call that reads the optimizer's states or the parameters outside a
  // forward (an evaluation, a save, a load): their bytes and the wait count in the next step.
  // Their failure comes out as a UserError that says where the run can be resumed from.
  void settle_step();
  // The end of a step's own work: waits for the compute and copy streams.
  void wait_for_streams();
  // The optimizer's part of a step, after backward: steps what it can, starts what is left
  // beside the next forward, and returns the step's bytes, counted with every stream drained.
  Traffic step_optimizer(StepStats& stats);
  // After a failed step: stops an overlapped optimizer (putting back what it kept) and returns
  // whether that left the rank half a step on: a step the gradients cannot change keeps nothing,
  // so the sub-groups it stepped beside backward stay stepped. Then `unusable` says so.
  bool abandon_overlap(const std::string& failure) noexcept;
  // After a failed step: waits for the streams (its work still queued reads the caller's batch
  // and the engine's buffers) and drops the errors they took from it.
  void drain_streams() noexcept;
  std::int64_t nvme_read_bytes() const;
  std::int64_t nvme_write_bytes() const;
  // The bytes moved so far, and the offloaded optimizer's part of them, which StepTraffic splits
  // into steps (engine/step_traffic.h).
  TrafficReading read_traffic() const;
  StepTraffic traffic{[this] { return read_traffic(); }};
  // What a call between two steps waited for the last one's optimizer, counted in the next.
  double carried_seconds = 0;
  std::int64_t host_bytes() const;

  // engine_checkpoint.cpp
  void check_usable() const;
  bool inconsistent() const;
  std::string resume_advice() const;
  std::vector<std::string> state_names() const;
  checkpoint::Manifest manifest_for(const std::string& tag) const;
  std::string agree_on_tag(const std::string& tag);
  std::vector<std::int64_t> gather_file_records(const std::vector<checkpoint::ManifestFile>& files,
                                                bool failed);
  std::vector<checkpoint::ManifestFile> files_from_records(
      const std::vector<std::int64_t>& records) const;
  std::vector<checkpoint::ManifestFile> write_states(const std::filesystem::path& directory);
  // The visitor that hands the planned save each sub-group the step steps (empty when none).
  zero::OptimizerOffload::StatesVisitor planned_save_writer();
  std::int64_t read_states(std::shared_ptr<const checkpoint::ShardReader> reader);
};

}  // namespace strata::engine
