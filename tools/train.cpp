// strata train: the main job. Reads a DeepSpeed config (or runs the built-in demo), builds the
// GPT it describes, and trains it with progress on the terminal, an optional metrics file, and
// the loss curves as a PNG at the end.
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
#include "tools/train_output.h"
#include "tools/train_stop.h"

namespace strata::tools {
namespace {

struct TrainOptions {
  std::string config_path;
  std::int64_t steps = 0;  // the last step's number; 0 = strata.train_steps
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
};

engine::LoadedConfig load(const TrainOptions& options, int world_size) {
  engine::LoadedConfig loaded = load_run_config(options.config_path, world_size);
  engine::CheckpointConfig& checkpoint = loaded.config.checkpoint;
  if (!options.save_dir.empty()) checkpoint.dir = options.save_dir;
  if (options.save_every) checkpoint.every_steps = *options.save_every;
  if (options.keep_last) checkpoint.keep_last = *options.keep_last;
  return loaded;
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

std::string tag_for(std::int64_t step) {
  return fmt::format("global_step{}", step);
}

// Saves into strata.checkpoint.dir (or --save-dir) and says so.
void save(engine::Engine& engine, const engine::Config& config, std::int64_t step, bool leader) {
  const engine::CheckpointInfo info = engine.save_checkpoint(config.checkpoint.dir, tag_for(step));
  if (!leader) return;
  base::logger("tools").info(
      "saved {} (step {}): {} {} {:.2f} s{}", info.path.string(), step,
      base::format_bytes(static_cast<double>(info.bytes)),
      info.during_step ? "written during the step's optimizer pass, and outside it in" : "in",
      info.seconds,
      info.pruned > 0 ? fmt::format(", {} older removed", info.pruned) : std::string());
}

// --resume: the engine continues from the checkpoint; the run from the batch after it.
std::int64_t resume(engine::Engine& engine, const std::string& from, bool leader) {
  if (from.empty()) return 0;
  const engine::CheckpointInfo info = engine.load_checkpoint(from);
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

// Where each model state lives under the config's ZeRO stage and offload settings.
std::string describe_placement(const engine::Config& config, int world_size) {
  const engine::ZeroConfig& zero = config.zero;
  auto where = [](const engine::OffloadConfig& offload) {
    switch (offload.device) {
      case engine::OffloadDevice::cpu:
        return std::string("CPU memory");
      case engine::OffloadDevice::nvme:
        return fmt::format("NVMe under {}", offload.nvme_path);
      case engine::OffloadDevice::none:
        break;
    }
    return std::string("the device");
  };
  const std::string ranks = fmt::format("{} rank(s)", world_size);
  switch (zero.stage) {
    case 0:
      return "stage 0: parameters, gradients and optimizer states replicated on the device";
    case 1:
      return fmt::format(
          "stage 1: optimizer states sharded over {} in {}; parameters and "
          "gradients replicated on the device",
          ranks, where(zero.offload_optimizer));
    case 2:
      return fmt::format(
          "stage 2: gradients and optimizer states sharded over {}, optimizer "
          "states in {}; parameters replicated on the device",
          ranks, where(zero.offload_optimizer));
    default:
      return fmt::format(
          "stage 3: everything sharded over {}; parameters in {}, optimizer "
          "states in {}, whole modules gathered on the device only while they run",
          ranks, where(zero.offload_param), where(zero.offload_optimizer));
  }
}

void print_setup(const engine::Config& config, const models::ModelPlan& plan,
                 const models::TokenDataset& data, gpu::Device& device, int world_size,
                 std::int64_t steps) {
  const char* precision = config.bf16.enabled ? "bf16 storage, fp32 compute and master weights"
                          : config.fp16.enabled
                              ? "fp16 storage with loss scaling, fp32 compute and master weights"
                              : "fp32";
  fmt::print("strata train\n");
  fmt::print("  model      {}\n", plan.summary());
  if (!plan.from_pretrained.empty()) fmt::print("  weights    {}\n", plan.from_pretrained);
  fmt::print("  device     {} ({} budget), {} rank(s)\n", device.name(),
             base::format_bytes(static_cast<double>(device.budget_bytes())), world_size);
  fmt::print("  zero       {}\n", describe_placement(config, world_size));
  fmt::print("  precision  {}\n", precision);
  fmt::print("  optimizer  {} lr {} | scheduler {} | clipping {}\n",
             engine::to_string(config.optimizer.type), config.optimizer.lr,
             engine::to_string(config.scheduler.type), config.gradient_clipping);
  fmt::print("  batch      {} x {} tokens per micro-batch, {} micro-batch(es) per step, {} steps\n",
             config.batch.train_micro_batch_size_per_gpu, plan.seq_len(),
             config.batch.gradient_accumulation_steps, steps);
  fmt::print("  data       {}: {} training and {} validation tokens\n", data.source,
             data.train().size(), data.validation().size());
  if (data.entropy_floor_nats > 0) {
    fmt::print(
        "  floor      the corpus's entropy rate is {:.4f} nats/token: no model can go "
        "below it\n",
        data.entropy_floor_nats);
  }
  std::fflush(stdout);
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
  engine::LoadedConfig loaded = load(options, world.world_size());
  const engine::Config& config = loaded.config;
  bool leader = world.rank() == 0;
  for (const std::string& warning : loaded.warnings) {
    if (leader) base::logger("tools").warn("{}", warning);
  }
  for (const std::string& note : loaded.notes) {
    if (leader) base::logger("tools").info("{}", note);
  }
  if (leader) make_timeline_folder(options.timeline_path);
  const models::ModelPlan plan = plan_model(config);
  models::TokenDataset data = load_data(config, plan);
  const bool sequential = config.strata.data.order == engine::DataOrder::sequential;
  if (sequential)
    data.check_sequential_fits(static_cast<int>(plan.batch()), static_cast<int>(plan.seq_len()));
  std::int64_t steps = options.steps > 0 ? options.steps : config.strata.train_steps;

  gpu::DeviceOptions device_options;
  device_options.memory_budget_bytes = config.strata.device_memory_budget;
  device_options.cuda_device_index = world.local_rank();  // one GPU per rank on a node
  std::unique_ptr<gpu::Device> device = gpu::open_device(device_options);
  std::unique_ptr<gpu::Ops> ops = gpu::create_ops(*device);
  std::unique_ptr<gpu::Comm> comm = gpu::create_comm(world, *device);
  if (leader) print_setup(config, plan, data, *device, world.world_size(), steps);

  // From here on SIGTERM and SIGINT stop the run between steps; one that comes while the engine
  // starts or loads is honoured before the first step.
  const StopSignals signals;
  std::unique_ptr<engine::Model> model = models::build_model(plan);
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
  const std::int64_t done_before = resume(engine, options.resume, leader);
  if (done_before >= steps && leader) {
    base::logger("tools").warn(
        "nothing to train: the checkpoint has trained {} batches and --steps "
        "(or strata.train_steps) is {}, the number of the run's last step, "
        "not a count; pass --steps {} or more to go on",
        done_before, steps, done_before + 1);
  }

  std::filesystem::create_directories(options.out_dir);
  MetricsWriter metrics(leader ? options.metrics_path : "", /*append=*/done_before > 0);
  TrainProgress progress(steps, config.steps_per_print, leader);
  std::int64_t accumulation = config.batch.gradient_accumulation_steps;
  std::int64_t micro_tokens = model->tokens_per_micro_batch();
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(accumulation * micro_tokens));
  std::vector<std::int32_t> targets(inputs.size());
  std::vector<LossPoint> curve;
  // The step's micro-batches on this rank: random windows (the step's global batch, whatever the
  // world size and micro-batch split), or the file in order; validation always draws at random.
  auto sample = [&](models::TokenView split, bool in_order, std::uint64_t seed, std::int64_t step,
                    std::int64_t batches) {
    for (std::int64_t micro = 0; micro < batches; ++micro) {
      auto at = static_cast<std::size_t>(micro * micro_tokens);
      auto count = static_cast<std::size_t>(micro_tokens);
      std::span<std::int32_t> micro_inputs = std::span(inputs).subspan(at, count);
      std::span<std::int32_t> micro_targets = std::span(targets).subspan(at, count);
      if (in_order) {
        models::sequential_batch(
            split,
            models::global_micro_batch(step, micro, accumulation, world.rank(), world.world_size()),
            static_cast<int>(plan.batch()), static_cast<int>(plan.seq_len()), micro_inputs,
            micro_targets);
        continue;
      }
      std::int64_t first =
          models::first_sequence(micro, world.rank(), world.world_size(), plan.batch());
      models::sample_sequences(split, seed, step, first, static_cast<int>(plan.batch()),
                               static_cast<int>(plan.seq_len()), micro_inputs, micro_targets);
    }
  };

  const bool saving = !config.checkpoint.dir.empty();
  // Saves every every_steps steps and after the last one (and when a signal stops the run).
  auto save_due = [&](std::int64_t step) {
    return saving &&
           ((config.checkpoint.every_steps > 0 && step % config.checkpoint.every_steps == 0) ||
            step == steps);
  };
  auto started = std::chrono::steady_clock::now();
  double last_validation = -1;
  double step_seconds = 0;  // the steps' own time, validation left out
  std::filesystem::path timeline_png;
  std::int64_t tokens_trained = 0;
  int stopped_by = signals.requested(*comm, *device);
  for (std::int64_t step = done_before + 1; step <= steps && stopped_by == 0; ++step) {
    sample(data.train(), sequential, config.strata.seed, step, accumulation);
    const bool timed = leader && !options.timeline_path.empty() && step == options.timeline_step;
    if (timed) base::timeline().start();
    // A save due after this step is made by it (with the states on NVMe, as its optimizer
    // writes them back).
    if (save_due(step)) engine.plan_checkpoint(config.checkpoint.dir, tag_for(step));
    engine::StepStats stats;
    try {
      stats = engine.train_batch(inputs, targets);
    } catch (...) {
      base::timeline().stop();
      throw;
    }
    if (timed) {
      base::timeline().stop();
      timeline_png =
          plot_timeline(options.timeline_path, base::timeline().spans(),
                        fmt::format("strata train: step {} on the {} device ({:.3f} s)", step,
                                    gpu::to_string(device->kind()), stats.seconds));
    }
    double validation = -1;
    if (step % options.eval_every == 0 || step == steps) {
      sample(data.validation(), false, config.strata.seed ^ 0x5EED, 0, accumulation);
      validation = engine.evaluate(inputs, targets);
      last_validation = validation;
    }
    double tokens_per_s = static_cast<double>(stats.tokens) / std::max(stats.seconds, 1e-9);
    step_seconds += stats.seconds;
    tokens_trained += stats.tokens;
    progress.update(stats, tokens_per_s, validation);
    metrics.write(stats, tokens_per_s, validation);
    curve.push_back({step, stats.loss, validation});
    stopped_by = signals.requested(*comm, *device);
    if (save_due(step) || (saving && stopped_by != 0)) save(engine, config, step, leader);
    if (stopped_by != 0) break;
  }
  progress.finish();
  if (leader && !options.timeline_path.empty() &&
      (options.timeline_step <= done_before || options.timeline_step > steps)) {
    base::logger("tools").warn(
        "--timeline-step {} is not a step of this run (steps {} to {}): no timeline was drawn",
        options.timeline_step, done_before + 1, steps);
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!leader) return stopped_by != 0 ? StopSignals::exit_status(stopped_by) : 0;

  std::filesystem::path png = plot_losses(options.out_dir, curve, data.entropy_floor_nats);
  std::int64_t done = static_cast<std::int64_t>(curve.size());
  std::string validation =
      last_validation >= 0 ? fmt::format("{:.4f}", last_validation) : "not measured";
  fmt::print("{} {} steps in {:.1f} s: loss {:.4f} -> {:.4f}, validation {}{}\n",
             stopped_by != 0 ? fmt::format("stopped by {} after", StopSignals::name(stopped_by))
                             : "trained",
             done, seconds, curve.empty() ? 0.0 : curve.front().train_loss,
             curve.empty() ? 0.0 : curve.back().train_loss, validation,
             data.entropy_floor_nats > 0 ? fmt::format(" (floor {:.4f})", data.entropy_floor_nats)
                                         : std::string());
  // Achieved GFLOP/s counts 6 x params x tokens plus attention (GptShape::flops_per_token);
  // `strata bench gemm` measures what the BLAS reaches on the same products.
  double seconds_or_tiny = std::max(step_seconds, 1e-9);
  fmt::print("throughput {:.0f} tokens/s, {:.2f} GFLOP/s achieved ({:.3g} FLOP per token)\n",
             static_cast<double>(tokens_trained) / seconds_or_tiny,
             model->flops_per_token() * static_cast<double>(tokens_trained) / seconds_or_tiny / 1e9,
             model->flops_per_token());
  if (!png.empty()) fmt::print("loss curves: {}\n", png.string());
  if (!timeline_png.empty())
    fmt::print("timeline of step {}: {}\n", options.timeline_step, timeline_png.string());
  if (!options.metrics_path.empty()) fmt::print("metrics: {}\n", options.metrics_path);
  return stopped_by != 0 ? StopSignals::exit_status(stopped_by) : 0;
}

}  // namespace

void add_train_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<TrainOptions>();
  auto* command = app.add_subcommand(
      "train",
      "Train a GPT with a DeepSpeed or Accelerate config (the built-in demo without --config)");
  command
      ->add_option("--config", options->config_path,
                   "DeepSpeed JSON config or Accelerate config (YAML)")
      ->check(CLI::ExistingFile);
  command->add_option("--steps", options->steps, "Optimizer steps (default: strata.train_steps)")
      ->check(CLI::PositiveNumber);
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
  command->callback([options, &context] { context.exit_status = run_training(*options); });
}

}  // namespace strata::tools
