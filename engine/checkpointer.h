#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/shard_reader.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "engine/memory/stream_ordered_memory.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optimizer_step.h"
#include "engine/run_record.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/param_coordinator.h"
#include "engine/zero/param_tier.h"

namespace strata::engine {

// What a checkpoint saves and loads (docs/checkpoints.md): the optimizer's states, through which
// a load also sets the parameter tier; the loss scaler; how far the run trained.
struct CheckpointParts {
  const Config& config;
  const Runtime& runtime;
  memory::StreamOrderedMemory& memory;  // small buffers for the ranks' agreements
  const zero::FlatLayout& layout;
  zero::ParamTier& tier;
  zero::ParamCoordinator& coordinator;
  OptimizerStep& optimizer;
  optim::LossScaler& loss_scaler;
  ParamCopy copy_type;
  RunRecord& record;
};

struct PlannedSave;

// Saves and loads the engine's checkpoints (Engine::save_checkpoint, plan_checkpoint,
// load_checkpoint): each rank streams its partition of the optimizer states, from whichever tier
// holds them, into one safetensors file per state, stored by parameter name and offset; rank 0
// writes the manifest and moves the checkpoint into place. Loading asks for this layout's pieces
// by name and offset, so it does not matter which stage, offload or world size saved them. The
// caller settles the optimizer's work first.
class Checkpointer {
 public:
  explicit Checkpointer(CheckpointParts parts);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  void plan(const std::filesystem::path& dir, const std::string& tag);
  CheckpointInfo save(const std::filesystem::path& dir, const std::string& tag);
  CheckpointInfo load(const std::filesystem::path& dir, const std::string& tag);

  // The visitor that hands the planned save each sub-group the next step steps (empty when none).
  OptimizerStep::StatesVisitor planned_writer();
  // The step that took the planned save along has stepped every sub-group into it: the run's
  // `step`th.
  void planned_step_taken(std::int64_t step);
  // Where a run whose states are lost can be resumed from.
  std::string resume_advice() const;
  // A checkpoint whose optimizer states the next step reads (load on NVMe), until they are
  // verified; empty when none.
  const std::filesystem::path& unverified_load() const noexcept { return unverified_load_; }

 private:
  int shard_rank() const;
  gpu::Stream& stream() const { return parts_.runtime.device.compute_stream(); }
  std::vector<std::string> state_names() const;
  checkpoint::Manifest manifest_for(const std::string& tag) const;
  std::string agree_on_tag(const std::string& tag);
  std::vector<std::int64_t> gather_file_records(const std::vector<checkpoint::ManifestFile>& files,
                                                bool failed);
  std::vector<checkpoint::ManifestFile> files_from_records(
      const std::vector<std::int64_t>& records) const;
  std::vector<checkpoint::ManifestFile> write_states(const std::filesystem::path& directory);
  // The optimizer's states from `reader`; returns the bytes read.
  std::int64_t read_states(std::shared_ptr<const checkpoint::ShardReader> reader);
  // The masters now, to the tier, and the other states left to the next step.
  std::int64_t read_masters_leave_states(std::shared_ptr<const checkpoint::ShardReader> reader);
  void check_optimizer(const checkpoint::Manifest& manifest,
                       const std::filesystem::path& where) const;

  CheckpointParts parts_;
  // The checkpoint this run last saved or loaded, for the resume advice of a failed step.
  std::filesystem::path last_checkpoint_;
  std::filesystem::path unverified_load_;
  // The save plan() asked the next step to make; null when none.
  std::unique_ptr<PlannedSave> planned_save_;
};

}  // namespace strata::engine
