// The fates of a failed step (docs/architecture.md, "Faults"): the step's traffic is forgotten,
// what runs beside it is stopped, its queued work drained; then the error goes on as it is when
// the states are intact, names where to resume when they are lost, and leaves the engine
// refusing every later call when they are partly a step's.
#include <fmt/format.h>

#include <chrono>

#include "base/error.h"
#include "base/log.h"
#include "engine/checkpointer.h"
#include "engine/engine.h"
#include "engine/optimizer_step.h"
#include "engine/run_record.h"
#include "engine/step_meter.h"
#include "engine/zero/param_tier.h"

namespace strata::engine {

void Engine::fail_step(std::exception_ptr failure) {
  // The optimizer must not keep a half-made overlapped step of a failed one.
  meter_->traffic().forget();
  try {
    std::rethrow_exception(failure);
  } catch (const UserError& error) {
    abandon_step(error.what());
    drain_streams();
    if (!inconsistent()) throw;
    const std::filesystem::path& loaded = checkpoints_->unverified_load();
    if (!loaded.empty()) {
      // The states the step read from the checkpoint it was loaded from failed (a read, its
      // CRC32C): that checkpoint is not one to resume from, and the error's fix says so.
      record_->unusable.fail(
          fmt::format("loading {} failed in the first step: {}", loaded.string(), error.what()));
      throw UserError(record_->unusable.cause(), error.fix(), error.exit_status());
    }
    // The states are lost: say where the run can be resumed from, keeping the cause's own fix.
    throw UserError(error.what(),
                    fmt::format("{}; then {}", error.fix(), checkpoints_->resume_advice()),
                    error.exit_status());
  } catch (const std::exception& error) {
    const bool half_stepped = abandon_step(error.what());
    drain_streams();
    if (!half_stepped) throw;
    throw UserError(record_->unusable.cause(), checkpoints_->resume_advice(), 1);
  } catch (...) {
    abandon_step("an unknown error");
    drain_streams();
    throw;
  }
}

// Stops an overlapped optimizer (putting back what it kept) and returns whether that left the
// rank half a step on: a step the gradients cannot change keeps nothing, so the sub-groups it
// stepped beside backward stay stepped. Then the record says so.
bool Engine::abandon_step(const std::string& failure) noexcept {
  if (!optimizer_->abandon()) return false;
  try {
    record_->unusable.fail(fmt::format(
        "a step failed ({}) after its optimizer had stepped part of the model beside backward: "
        "this rank's parameters and optimizer states are partly that step's",
        failure));
  } catch (...) {
    record_->unusable.fail(
        "a step failed after its optimizer had stepped part of the model beside backward");
  }
  return true;
}

// A step that failed part way may have left work queued that reads the caller's batch (the
// compute stream) and the engine's buffers (the copy streams): it runs out before the caller
// frees either. A copy that waited for failed compute work carries that failure on its stream;
// the step reports it once, and the next step's work must not be skipped for it.
void Engine::drain_streams() noexcept {
  gpu::Device& device = runtime_.device;
  for (gpu::Stream* each : {&device.compute_stream(), &device.h2d_stream(), &device.d2h_stream()}) {
    try {
      each->synchronize();
    } catch (const std::exception& error) {
      base::logger("engine").debug("work of the failed step failed too: {}", error.what());
    }
  }
}

bool Engine::inconsistent() const {
  return tier_->inconsistent() || optimizer_->inconsistent();
}

// Waits for the last step's sub-groups left stepping beside the next forward (the next backward
// overwrites the gradients they read); their bytes count in this step. Rethrows their failure.
void Engine::settle_late_sub_groups() {
  if (!meter_->traffic().optimizer_running()) return;
  try {
    optimizer_->settle_late();
  } catch (...) {
    meter_->traffic().forget();
    throw;
  }
  meter_->traffic().optimizer_finished();
}

// The same before a call that reads the optimizer's states or the parameters outside a forward
// (an evaluation, a save, a load): their bytes and the wait count in the next step. Their
// failure comes out as a UserError that says where the run can be resumed from.
void Engine::settle_step() {
  if (!meter_->traffic().optimizer_running()) return;
  const auto started = std::chrono::steady_clock::now();
  try {
    settle_late_sub_groups();
  } catch (const UserError& error) {
    // The optimizer marked itself inconsistent: say where the run can be resumed from.
    throw UserError(error.what(),
                    fmt::format("{}; then {}", error.fix(), checkpoints_->resume_advice()),
                    error.exit_status());
  }
  meter_->carry(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

}  // namespace strata::engine
