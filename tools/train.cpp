// strata train: the main job. Reads a DeepSpeed config (or runs the built-in demo), builds the
// model it describes, and trains it with progress on the terminal, an optional metrics file, and
// the loss curves as a PNG at the end. train_on reads top to bottom: what to run (all checked
// before anything is built), the device and the engine, the steps, the summary.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "base/error.h"
#include "base/log.h"
#include "base/timeline.h"
#include "base/units.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "gpu/comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "gpu/process_group.h"
#include "models/data/token_dataset.h"
#include "models/model_plan.h"
#include "tools/commands.h"
#include "tools/run_setup.h"
#include "tools/timeline_plot.h"
#include "tools/train_batches.h"
#include "tools/train_checkpoints.h"
#include "tools/train_output.h"
#include "tools/train_sample.h"
#include "tools/train_setup.h"
#include "tools/train_stop.h"

namespace strata::tools {
namespace {

struct TrainOptions {
  std::string config_path;
  std::int64_t steps = 0;  // the run's last step; 0 = the checkpoint's run, or strata.train_steps
  bool bf16 = false;       // as the HF Trainer's --bf16: an "auto" or absent bf16.enabled is on
  bool fp16 = false;
  bool verbose = false;  // every note of the config, not one line for its "auto" values
  std::string metrics_path;
  std::string out_dir = "strata-out";
  std::int64_t eval_every = 50;
  // Override strata.checkpoint when given.
  std::string save_dir;
  std::optional<std::int64_t> save_every;
  std::optional<std::int64_t> keep_last;
  std::string resume;  // a save directory (its latest) or a checkpoint directory
  // --timeline F.png: the spans of step `timeline_step` (rank 0's).
  std::string timeline_path;
  std::int64_t timeline_step = 2;
  SampleOptions sample;
};

// What to run, every check `strata config check` makes done (tools/run_setup.h): the config with
// the command line's overrides, the model's plan and the data. The run's length is one number:
// --steps, else the length of the run a resumed checkpoint belongs to, else strata.train_steps;
// the config resolves with it, so that an "auto" total_num_steps is the same number (as the HF
// Trainer fills it from max_steps).
RunSetup prepare(const TrainOptions& options, int world_size,
                 const std::optional<ResumePoint>& resume_point) {
  engine::ConfigOverrides overrides;
  if (options.steps > 0) {
    overrides.train_steps = options.steps;
  } else if (resume_point) {
    overrides.train_steps = resume_point->run_steps;
  }
  overrides.bf16 = options.bf16;
  overrides.fp16 = options.fp16;
  RunSetup setup = prepare_run(options.config_path, world_size, overrides);
  engine::CheckpointConfig& checkpoint = setup.loaded.config.checkpoint;
  if (!options.save_dir.empty()) checkpoint.dir = options.save_dir;
  if (options.save_every) checkpoint.every_steps = *options.save_every;
  if (options.keep_last) checkpoint.keep_last = *options.keep_last;
  if (options.save_every && checkpoint.dir.empty()) {
    throw UserError(fmt::format("--save-every {} without a save directory: nothing would be saved",
                                *options.save_every),
                    "add --save-dir DIR (or set strata.checkpoint.dir in the config)", 2);
  }
  return setup;
}

// --timeline's folder, made before anything starts so that a path that cannot be written is
// refused at once rather than at the step it draws.
void make_timeline_folder(const std::filesystem::path& png) {
  if (png.empty() || !png.has_parent_path()) return;
  std::error_code error;
  std::filesystem::create_directories(png.parent_path(), error);
  if (error) {
    throw UserError(fmt::format("--timeline {}: its folder {} cannot be made: {}", png.string(),
                                png.parent_path().string(), error.message()),
                    "give --timeline a path in a folder you can write", 2);
  }
}

// A resumed run: the checkpoint must hold this model, and its run must have steps left.
// Returns false, having said why, when the checkpoint is already at or past the last step.
bool check_resume(const ResumePoint& point, engine::Model& model, std::int64_t last_step,
                  const TrainOptions& options, bool leader) {
  check_resume_model(point, model);
  const std::int64_t done = point.manifest.batches;
  if (done >= last_step) {
    if (leader) {
      fmt::print(
          "nothing to train: {} is already at step {}, and this run's last step is {} ({}); pass "
          "--steps {} or more to train on\n",
          point.checkpoint.string(), done, last_step,
          options.steps > 0 ? "--steps" : "the length of the run that saved it", done + 1);
    }
    return false;
  }
  if (leader && point.run_steps && *point.run_steps != last_step) {
    base::logger("tools").info(
        "the checkpoint's run was {} steps long; this one is {} (--steps): a schedule on "
        "\"auto\" total_num_steps follows the new length",
        *point.run_steps, last_step);
  }
  return true;
}

// The run as the loop sees it: what it trains, where it reports and saves, and how it stops.
struct Run {
  const TrainOptions& options;
  engine::Engine& engine;
  gpu::Comm& comm;
  gpu::Device& device;
  StepBatches& batches;
  const RunSaves& saves;
  const TrainSamples& samples;
  const StopSignals& signals;
  std::int64_t first_step;
  std::int64_t last_step;
  bool leader;
};

// What the loop leaves for the summary.
struct RunOutcome {
  int stopped_by = 0;               // the signal that stopped the run, or 0
  std::vector<LossPoint> curve;     // earlier runs' points (a resumed run), then this run's
  std::size_t first_point = 0;      // this run's first point in `curve`
  double step_seconds = 0;          // the steps' own time, validation left out
  std::int64_t tokens_trained = 0;  // by this run, over all ranks
  double last_validation = -1;
  std::filesystem::path timeline_png;
};

// Step `step` with --timeline's recording around it when it is the step to draw.
engine::StepStats timed_step(Run& run, std::int64_t step, RunOutcome& outcome) {
  const bool timed =
      run.leader && !run.options.timeline_path.empty() && step == run.options.timeline_step;
  if (timed) base::timeline().start();
  engine::StepStats stats;
  try {
    stats = run.engine.train_batch(run.batches.inputs(), run.batches.targets());
  } catch (...) {
    base::timeline().stop();
    throw;
  }
  if (timed) {
    // A CUDA stream's spans are read back when it synchronizes; the step ends with the compute
    // stream's, and this reads the copy streams' before the recording stops.
    run.device.synchronize();
    base::timeline().stop();
    outcome.timeline_png =
        plot_timeline(run.options.timeline_path, base::timeline().spans(),
                      fmt::format("strata train: step {} on the {} device ({:.3f} s)", step,
                                  gpu::to_string(run.device.kind()), stats.seconds));
  }
  return stats;
}

// The steps, as llm.c's loop reads: the batch, the step, the validation, the sample, the line,
// the save.
RunOutcome train_steps(Run& run, RunOutcome outcome, TrainProgress& progress,
                       MetricsWriter& metrics) {
  outcome.stopped_by = run.signals.requested(run.comm, run.device);
  for (std::int64_t step = run.first_step; step <= run.last_step && outcome.stopped_by == 0;
       ++step) {
    run.batches.fill_training(step);
    if (run.saves.due(step)) run.saves.plan(run.engine, step);
    const engine::StepStats stats = timed_step(run, step, outcome);
    double validation = -1;
    if (step % run.options.eval_every == 0 || step == run.last_step) {
      run.batches.fill_validation();
      validation = run.engine.evaluate(run.batches.inputs(), run.batches.targets());
      outcome.last_validation = validation;
    }
    std::optional<TrainSample> sample;
    if (run.samples.due(step, run.last_step)) sample = run.samples.take(run.engine);
    const double tokens_per_s = static_cast<double>(stats.tokens) / std::max(stats.seconds, 1e-9);
    outcome.step_seconds += stats.seconds;
    outcome.tokens_trained += stats.tokens;
    progress.update(stats, tokens_per_s, validation);
    if (sample) progress.show(fmt::format("sample at step {}: {}", step, sample->line()));
    metrics.write(stats, tokens_per_s, validation, sample);
    outcome.curve.push_back({step, stats.loss, validation});
    outcome.stopped_by = run.signals.requested(run.comm, run.device);
    if (run.saves.due(step) || (run.saves.enabled() && outcome.stopped_by != 0))
      run.saves.save(run.engine, step);
  }
  progress.finish();
  return outcome;
}

// The closing lines: losses, throughput, where the curves, timeline and metrics went, and what a
// stop without a save directory lost.
void print_summary(const Run& run, const RunOutcome& outcome, const engine::Model& model,
                   const models::TokenDataset& data, double seconds) {
  const TrainOptions& options = run.options;
  if (options.timeline_step < run.first_step || options.timeline_step > run.last_step) {
    if (!options.timeline_path.empty()) {
      base::logger("tools").warn(
          "--timeline-step {} is not a step of this run (steps {} to {}): no timeline was drawn",
          options.timeline_step, run.first_step, run.last_step);
    }
  }
  const std::filesystem::path png =
      plot_losses(options.out_dir, outcome.curve, data.entropy_floor_nats);
  const std::span<const LossPoint> trained = std::span(outcome.curve).subspan(outcome.first_point);
  const std::string validation = outcome.last_validation >= 0
                                     ? fmt::format("{:.4f}", outcome.last_validation)
                                     : "not measured";
  fmt::print("{} {} steps in {:.1f} s: loss {:.4f} -> {:.4f}, validation {}{}\n",
             outcome.stopped_by != 0
                 ? fmt::format("stopped by {} after", StopSignals::name(outcome.stopped_by))
                 : "trained",
             trained.size(), seconds, trained.empty() ? 0.0 : trained.front().train_loss,
             trained.empty() ? 0.0 : trained.back().train_loss, validation,
             data.entropy_floor_nats > 0 ? fmt::format(" (floor {:.4f})", data.entropy_floor_nats)
                                         : std::string());
  if (outcome.stopped_by != 0 && !run.saves.enabled()) {
    base::logger("tools").warn(
        "nothing was saved: the run has no save directory, so its {} steps are lost (give "
        "--save-dir DIR, or strata.checkpoint.dir, to save when a signal stops the run)",
        trained.size());
  }
  // Achieved GFLOP/s counts 6 x params x tokens plus attention (GptShape::flops_per_token);
  // `strata bench gemm` measures what the BLAS reaches on the same products.
  const double seconds_or_tiny = std::max(outcome.step_seconds, 1e-9);
  const auto tokens = static_cast<double>(outcome.tokens_trained);
  fmt::print("throughput {:.0f} tokens/s, {:.2f} GFLOP/s achieved ({:.3g} FLOP per token)\n",
             tokens / seconds_or_tiny, model.flops_per_token() * tokens / seconds_or_tiny / 1e9,
             model.flops_per_token());
  if (!png.empty()) fmt::print("loss curves: {}\n", png.string());
  if (!outcome.timeline_png.empty())
    fmt::print("timeline of step {}: {}\n", options.timeline_step, outcome.timeline_png.string());
  if (!options.metrics_path.empty()) fmt::print("metrics: {}\n", options.metrics_path);
}

int train_on(gpu::World& world, const TrainOptions& options);

// A rank that fails must not leave the others waiting in a collective it will never join: print
// the error here, then end the whole job (with one rank, World returns and main exits as usual).
int run_training(const TrainOptions& options) {
  gpu::World world;
  try {
    return train_on(world, options);
  } catch (const UserError& error) {
    if (world.world_size() == 1) throw;
    std::fprintf(stderr, "strata: rank %d: error: %s\n  fix: %s\n", world.rank(), error.what(),
                 error.fix().c_str());
    world.abort_other_ranks(error.exit_status());
    throw;
  } catch (const std::exception& error) {
    if (world.world_size() == 1) throw;
    std::fprintf(stderr, "strata: rank %d: error: %s\n", world.rank(), error.what());
    world.abort_other_ranks(1);
    throw;
  }
}

int train_on(gpu::World& world, const TrainOptions& options) {
  const bool leader = world.rank() == 0;
  // What to run, all checked before anything is built: the checkpoint to continue from, the
  // config with the run's length, the model and the data.
  const std::optional<ResumePoint> resume_point = find_resume_point(options.resume);
  const RunSetup setup = prepare(options, world.world_size(), resume_point);
  const engine::Config& config = setup.loaded.config;
  const models::ModelPlan& plan = setup.plan;
  const models::TokenDataset& data = setup.data;
  const std::int64_t last_step = config.strata.train_steps;
  if (leader) print_config_messages(setup.loaded, !options.config_path.empty(), options.verbose);
  if (leader) make_timeline_folder(options.timeline_path);
  const TrainSamples samples(options.sample, config, plan, data);
  if (resume_point &&
      !check_resume(*resume_point, *models::build_model(plan), last_step, options, leader))
    return 0;

  // The device and the engine on it.
  gpu::DeviceOptions device_options;
  device_options.memory_budget_bytes = config.strata.device_memory_budget;
  device_options.cuda_device_index = world.local_rank();  // one GPU per rank on a node
  const std::unique_ptr<gpu::Device> device = gpu::open_device(device_options);
  const std::unique_ptr<gpu::Ops> ops =
      gpu::create_ops(*device, gpu::OpsOptions{.tf32 = config.strata.allow_tf32});
  const std::unique_ptr<gpu::Comm> comm = gpu::create_comm(world, *device);
  // The model holds device memory (its activations), so it goes before the device does.
  const std::unique_ptr<engine::Model> model = models::build_model(plan);
  if (leader) print_setup(config, plan, data, *device, world.world_size(), last_step);
  // From here on SIGTERM and SIGINT stop the run between steps; one that comes while the engine
  // starts or loads is honoured before the first step.
  const StopSignals signals;
  engine::Runtime runtime{*device, *ops, *comm};
  const auto starting = std::chrono::steady_clock::now();
  engine::Engine engine(runtime, config, *model);
  if (leader) {
    // The weights' import (from_pretrained) or initialisation is most of this: each tier filled
    // range by range, the swap files written, before the first step.
    base::logger("tools").info(
        "engine ready in {:.2f} s ({} parameters {})",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - starting).count(),
        base::format_count(static_cast<double>(plan.parameter_count())),
        plan.from_pretrained.empty() ? std::string("initialised from strata.seed")
                                     : "read from " + plan.from_pretrained);
  }
  const std::int64_t done_before = resume_point ? resume_from(engine, *resume_point, leader) : 0;
  samples.reserve(engine);

  // The steps.
  std::filesystem::create_directories(options.out_dir);
  StepBatches batches(data,
                      {config.batch.gradient_accumulation_steps, plan.batch(), plan.seq_len(),
                       world.rank(), world.world_size()},
                      config.strata.data.order == engine::DataOrder::sequential,
                      config.strata.seed);
  const RunSaves saves(config.checkpoint, last_step, leader);
  Run run{options, engine,  *comm,           *device,   batches, saves,
          samples, signals, done_before + 1, last_step, leader};
  MetricsWriter metrics(leader ? options.metrics_path : "", /*append=*/done_before > 0);
  TrainProgress progress(run.first_step, last_step, config.steps_per_print, leader);
  RunOutcome outcome;
  if (done_before > 0) outcome.curve = earlier_losses(options.out_dir, done_before);
  outcome.first_point = outcome.curve.size();
  const auto started = std::chrono::steady_clock::now();
  outcome = train_steps(run, std::move(outcome), progress, metrics);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (leader) print_summary(run, outcome, *model, data, seconds);
  return outcome.stopped_by != 0 ? StopSignals::exit_status(outcome.stopped_by) : 0;
}

// --sample-every, --sample-prompt, --sample-tokens: samples during training (tools/train_sample.h).
void add_sample_options(CLI::App& command, SampleOptions& sample) {
  command
      .add_option("--sample-every", sample.every,
                  "Print a greedy sample from the model every N steps and at the last (also in "
                  "--metrics)")
      ->check(CLI::PositiveNumber);
  command.add_option("--sample-prompt", sample.prompt,
                     "The sample's prompt (default: the validation split's first tokens)");
  command
      .add_option("--sample-tokens", sample.tokens,
                  "New tokens per sample, as far as the sequence allows")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

}  // namespace

void add_train_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<TrainOptions>();
  auto* command = app.add_subcommand(
      "train",
      "Train a model (strata's GPT, or a Hugging Face GPT-2 or Llama-family model) with a "
      "DeepSpeed or Accelerate config (the built-in demo without --config)");
  command
      ->add_option("--config", options->config_path,
                   "DeepSpeed JSON config or Accelerate config (YAML)")
      ->check(CLI::ExistingFile);
  command
      ->add_option("--steps", options->steps,
                   "The run's last step, which an \"auto\" total_num_steps follows (default: the "
                   "resumed checkpoint's run, else strata.train_steps)")
      ->check(CLI::PositiveNumber);
  auto* bf16 = command->add_flag("--bf16", options->bf16,
                                 "bf16 mixed precision: an \"auto\" or absent bf16.enabled is true "
                                 "(as the HF Trainer's --bf16)");
  command
      ->add_flag("--fp16", options->fp16,
                 "fp16 mixed precision with loss scaling: an \"auto\" or absent fp16.enabled is "
                 "true (as the HF Trainer's --fp16)")
      ->excludes(bf16);
  command->add_flag("--verbose", options->verbose,
                    "Print every note on how the config was read, not one line for its \"auto\" "
                    "values");
  command->add_option("--metrics", options->metrics_path, "Write one JSON object per step here");
  command->add_option("--out", options->out_dir, "Directory for loss.png and loss.tsv")
      ->capture_default_str();
  command->add_option("--eval-every", options->eval_every, "Validation loss every N steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--save-dir", options->save_dir,
                      "Save checkpoints here (strata.checkpoint.dir): every --save-every steps, "
                      "after the last step, and on SIGTERM/SIGINT");
  command
      ->add_option("--save-every", options->save_every,
                   "Save every N steps (strata.checkpoint.every_steps; 0: only at the end)")
      ->check(CLI::NonNegativeNumber);
  command
      ->add_option("--keep-last", options->keep_last,
                   "Keep the newest K checkpoints, remove older ones (0 keeps all)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--resume", options->resume,
                      "Continue from a save directory's latest checkpoint, or from DIR/TAG; "
                      "--steps stays the number of the run's last step");
  command->add_option("--timeline", options->timeline_path,
                      "Draw what each stream, the host, the optimizer and the NVMe did during one "
                      "step as a PNG here (and its spans beside it as .tsv)");
  command
      ->add_option("--timeline-step", options->timeline_step,
                   "The step --timeline draws (the first ones also record the module order)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_sample_options(*command, options->sample);
  command->callback([options, &context] { context.exit_status = run_training(*options); });
}

}  // namespace strata::tools
