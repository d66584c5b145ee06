#pragma once

// The harness of the ZeRO tests: a tiny GPT trained on one fixed
// global batch per step, cut across ranks and micro-batches the same way whatever the stage, so
// that a run at any stage, offload and world size can be compared with stage 0 on one rank.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "gpu/comm.h"
#include "gpu/process_group.h"

namespace strata::engine::zero_testing {

// The process's World, started by zero_test_main.cpp before any test runs.
gpu::World& test_world();

// A Comm of one rank that belongs to no World (rank 0 of 1, every collective a copy, as the solo
// backend's): the stage-0, world-of-one reference runs inside an mpirun job on every rank with
// it, since create_comm under MPI always spans every rank of the job.
std::unique_ptr<gpu::Comm> create_local_comm();

// Which ranks a run spans: this process alone (the reference), or every rank of the job.
enum class Ranks { local, world };

// The shape of the tiny GPT of these tests.
struct TinyModel {
  std::int64_t n_layer = 2;
  std::int64_t n_head = 2;
  std::int64_t d_model = 32;
  std::int64_t seq_len = 16;
  std::int64_t vocab = 256;
};

// The config every equivalence run shares: AdamW at lr 1e-3, bf16, gradient clipping 1.0, seed 7,
// stage 0, nothing offloaded, `micro_batch` rows per micro-batch and `accumulation` micro-batches
// per step. Tests edit the returned JSON ("zero_optimization", "strata") before training.
nlohmann::json base_config(std::int64_t micro_batch, std::int64_t accumulation = 1,
                           const TinyModel& model = {});

// Parameters the tiny GPT of `model` declares (without padding).
std::int64_t parameter_count(const TinyModel& model);

// What a run produced, step by step, and what the tests compare.
struct TrainedRun {
  std::vector<StepStats> steps;
  std::vector<double> losses;
  // evaluate() over this rank's batch of step s, before step s, for s = 1, 1 + eval_every, ...
  std::vector<double> eval_losses;
  std::vector<float> params;  // master_parameters() after the last step
  // Traffic of each train_batch call: the Comm's counters after it minus those before it.
  std::vector<gpu::CommCounters> traffic;
  // Host functions launched on the compute stream by each train_batch call.
  std::vector<std::int64_t> compute_host_functions;
  // The swap I/O completions reaped before each train_batch call (after its evaluation, if any),
  // over every swap store: where a planted fault falls (aio::FaultPlan numbers them).
  std::vector<std::int64_t> swap_completions;
  // From the engine's layout and the model, for the traffic theory.
  std::vector<std::int64_t> padded_numel;  // per module
  std::vector<int> borrowers;              // per module: how many other modules borrow it
  std::int64_t parameter_count = 0;
  int world_size = 1;
  // With CheckpointPlan::stop_on_error: the UserError that stopped the run ("" when none did),
  // and the device and pinned bytes still held once the engine was gone.
  std::string error;
  std::string error_fix;
  // Saves that the step before them made (CheckpointInfo::during_step).
  int saves_during_step = 0;
  std::int64_t device_bytes_left = 0;
  std::int64_t pinned_bytes_left = 0;
};

// Builds the device (budget: strata.device_memory_budget, else 256 MiB), the Comm, the model and
// the Engine for `config` and trains `steps` steps. Step s's global batch has world_size x
// micro_batch x accumulation rows; micro-batch k of rank r holds global rows
// k x world_size x micro_batch + r x micro_batch + [0, micro_batch), so that the union over ranks
// and micro-batches is the reference's one batch of the same rows. With `eval_every` > 0,
// evaluate() runs over the step's batch before every eval_every-th step (an order of modules,
// forward only, that differs from a training step's).
//
// With `checkpoints`, the run saves after step save_at (and every save_every steps) into save_dir
// (tag global_step<N>), and/or first loads resume_from and then trains from the step after the
// checkpoint's to `steps`. `faults` are planted in the engine's swap and checkpoint I/O; with
// stop_on_error a UserError ends the run and is returned in TrainedRun::error instead of thrown.
struct CheckpointPlan {
  std::filesystem::path save_dir;
  int save_at = 0;
  std::filesystem::path resume_from;
  std::string resume_tag = {};  // with resume_from: that tag, not the one `latest` names
  int save_every = 0;
  // Engine::plan_checkpoint this many steps before each save: 1, just before the step it saves
  // after (the step makes it); 2, a step early, so that the plan goes stale and the save is made
  // the usual way. 0: no plans.
  int plan_ahead = 0;
  IoFaults faults = {};
  bool stop_on_error = false;
};
TrainedRun train(const nlohmann::json& config, Ranks ranks, int steps, int eval_every = 0,
                 const CheckpointPlan& checkpoints = {});

// train(config, Ranks::local, steps): computed once per process for each config and shared by
// the tests that compare against it.
const TrainedRun& reference(const nlohmann::json& config, int steps);

// Every step's loss within `relative` x the reference's, and its gradient norm within 10 x
// `relative` x the reference's: the norm is a sum of squares of values that rounding perturbs
// more than the loss (measured: 2.4e-4 apart at step 26 for stage 0 across 2 ranks, whose losses
// stay within 1e-4), and it is there to catch a gradient scaled by the wrong count of ranks or
// micro-batches (AdamW hides the scale from the losses), which is off by a factor of 2 or more.
void expect_losses_near(const TrainedRun& run, const TrainedRun& reference, double relative);

// Every final master parameter within `relative` x the largest |reference parameter| (about 1:
// the layer-norm gains), so the bound is absolute across the model.
void expect_params_near(const TrainedRun& run, const TrainedRun& reference, double relative);

// A fresh directory for swap files, removed with everything in it at the end of the test. Its
// name carries the process id, so the ranks of one job never share one; with `shared`, it carries
// the MPI job's id instead and every rank of the job names the same directory (as one config file
// for every rank does), and the destructor waits for every rank before rank 0 removes it.
class TempDirectory {
 public:
  explicit TempDirectory(bool shared = false);
  ~TempDirectory();
  TempDirectory(const TempDirectory&) = delete;
  TempDirectory& operator=(const TempDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string string() const { return path_.string(); }

 private:
  std::filesystem::path path_;
  bool shared_;
};

// Regular files left anywhere under `directory` (swap files must be removed at clean exit).
std::vector<std::filesystem::path> files_under(const std::filesystem::path& directory);

// A zero_optimization.offload_* section for `device` ("none", "cpu", "nvme"), unpinned (the
// locked-memory limit here is 8 MiB), with small buffers so that the pool stays small.
nlohmann::json offload_section(const std::string& device, const std::string& nvme_path,
                               bool is_param);

// `config` with "zero_optimization" set to `zero` plus the offload sections of `param_device` and
// `optimizer_device` ("none", "cpu", "nvme"; offload_section), and the test's job name.
nlohmann::json with_zero(nlohmann::json config, nlohmann::json zero,
                         const std::string& param_device, const std::string& optimizer_device,
                         const std::string& nvme_path);

// The test's name and this rank, for job names and messages.
std::string job_name_for_test();

}  // namespace strata::engine::zero_testing
