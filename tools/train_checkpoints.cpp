#include "tools/train_checkpoints.h"

#include <fmt/format.h>

#include <vector>

#include "base/log.h"
#include "base/units.h"
#include "engine/checkpoint/model_match.h"
#include "engine/checkpoint/save_directory.h"
#include "engine/engine.h"
#include "engine/memory_estimate.h"

namespace strata::tools {
namespace {

std::string tag_for(std::int64_t step) {
  return fmt::format("global_step{}", step);
}

// The saved run's strata.train_steps from the resolved config its manifest keeps.
std::optional<std::int64_t> saved_run_steps(const engine::checkpoint::Manifest& manifest) {
  const nlohmann::json& config = manifest.config;
  if (!config.is_object() || !config.contains("strata")) return std::nullopt;
  const nlohmann::json& strata = config["strata"];
  if (!strata.is_object() || !strata.contains("train_steps") ||
      !strata["train_steps"].is_number_integer())
    return std::nullopt;
  return strata["train_steps"].get<std::int64_t>();
}

}  // namespace

std::optional<ResumePoint> find_resume_point(const std::string& resume) {
  if (resume.empty()) return std::nullopt;
  ResumePoint point;
  point.checkpoint = engine::checkpoint::resolve_checkpoint(resume);
  point.manifest = engine::checkpoint::read_manifest(point.checkpoint);
  point.run_steps = saved_run_steps(point.manifest);
  return point;
}

void check_resume_model(const ResumePoint& point, engine::Model& model) {
  std::vector<engine::checkpoint::ManifestTensor> tensors;
  for (const std::vector<engine::ParamSpec>& module : engine::declare(model).modules) {
    for (const engine::ParamSpec& spec : module)
      tensors.push_back({spec.name, spec.shape, spec.unpadded_rows});
  }
  engine::checkpoint::check_model(point.manifest, point.checkpoint, tensors);
}

std::int64_t resume_from(engine::Engine& engine, const ResumePoint& point, bool leader) {
  const engine::CheckpointInfo info = engine.load_checkpoint(point.checkpoint);
  if (leader) {
    base::logger("tools").info(
        "resumed from {} (step {}): {} verified and read in {:.2f} s{}; continuing with batch {}",
        info.path.string(), info.step, base::format_bytes(static_cast<double>(info.bytes)),
        info.seconds,
        info.during_step ? " (the masters; the optimizer's states are read by the first step)" : "",
        info.batches + 1);
  }
  return info.batches;
}

RunSaves::RunSaves(const engine::CheckpointConfig& checkpoint, std::int64_t last_step, bool leader)
    : checkpoint_(checkpoint), last_step_(last_step), leader_(leader) {}

bool RunSaves::due(std::int64_t step) const {
  if (!enabled()) return false;
  return (checkpoint_.every_steps > 0 && step % checkpoint_.every_steps == 0) || step == last_step_;
}

void RunSaves::plan(engine::Engine& engine, std::int64_t step) const {
  engine.plan_checkpoint(checkpoint_.dir, tag_for(step));
}

void RunSaves::save(engine::Engine& engine, std::int64_t step) const {
  const engine::CheckpointInfo info = engine.save_checkpoint(checkpoint_.dir, tag_for(step));
  if (!leader_) return;
  base::logger("tools").info(
      "saved {} (step {}): {} {} {:.2f} s{}", info.path.string(), step,
      base::format_bytes(static_cast<double>(info.bytes)),
      info.during_step ? "written during the step's optimizer pass, and outside it in" : "in",
      info.seconds,
      info.pruned > 0 ? fmt::format(", {} older removed", info.pruned) : std::string());
}

}  // namespace strata::tools
