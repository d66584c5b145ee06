#pragma once

// Where `strata train`'s checkpoints come from and go: the checkpoint --resume names, read and
// checked against the run before the engine is built, and the saves the run makes.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "engine/checkpoint/manifest.h"
#include "engine/config/config.h"

namespace strata::engine {
class Engine;
class Model;
}  // namespace strata::engine

namespace strata::tools {

// The checkpoint a run continues from, as its manifest describes it.
struct ResumePoint {
  std::filesystem::path checkpoint;  // the checkpoint directory --resume resolved to
  engine::checkpoint::Manifest manifest;
  // The length of the run that saved it (its strata.train_steps, the number of its last step):
  // a resumed run keeps it unless --steps says otherwise. nullopt when the manifest lacks it.
  std::optional<std::int64_t> run_steps;
};

// The checkpoint `resume` names (a save directory, whose `latest` it follows, or a checkpoint
// directory), its manifest read; nullopt for "". Throws UserError naming the path and what to
// give for a path that holds no checkpoint or a damaged manifest.
std::optional<ResumePoint> find_resume_point(const std::string& resume);

// Refuses a checkpoint of another model than `model` (tensors by name and shape), naming the
// model the checkpoint holds, before the engine is built.
void check_resume_model(const ResumePoint& point, engine::Model& model);

// Continues `engine` from `point` and says so; returns the batches trained before it.
std::int64_t resume_from(engine::Engine& engine, const ResumePoint& point, bool leader);

// The saves of a run into strata.checkpoint.dir (or --save-dir): every every_steps steps, after
// the run's last step, and when a signal stops it. Without a directory it saves nothing.
class RunSaves {
 public:
  RunSaves(const engine::CheckpointConfig& checkpoint, std::int64_t last_step, bool leader);

  bool enabled() const { return !checkpoint_.dir.empty(); }
  // Whether a save is due after `step` on the schedule.
  bool due(std::int64_t step) const;
  // Asks the step to make the save due after it (with the states on NVMe its optimizer writes
  // them as it steps them); collective, as the step is.
  void plan(engine::Engine& engine, std::int64_t step) const;
  // Saves after `step` and says so; collective.
  void save(engine::Engine& engine, std::int64_t step) const;

 private:
  engine::CheckpointConfig checkpoint_;
  std::int64_t last_step_;
  bool leader_;
};

}  // namespace strata::tools
