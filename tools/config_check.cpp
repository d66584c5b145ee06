// strata config check FILE [--json] [--world-size N] [--steps N] [--bf16 | --fp16]: load a
// DeepSpeed config the way `strata train` will, with the same checks of the model, the data and the
// swap folders (tools/run_setup.h), and print it resolved (every default filled in) or every
// problem found in it. Exit 0 when valid, 1 when not (a config that fails the check is the answer,
// not a usage error).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "engine/config/config.h"
#include "engine/config/config_error.h"
#include "tools/commands.h"
#include "tools/run_setup.h"

namespace strata::tools {
namespace {

struct CheckOptions {
  std::string path;
  bool json = false;
  int world_size = 1;
  engine::ConfigOverrides overrides;  // --steps, --bf16, --fp16, as `strata train` takes them
};

std::string summary(const engine::Config& config, int world_size) {
  const char* precision = config.bf16.enabled ? "bf16" : config.fp16.enabled ? "fp16" : "fp32";
  return fmt::format(
      "ZeRO stage {}, params offload {}, optimizer offload {}, {}, {} {}, batch {} = {} x {} x {} "
      "ranks",
      config.zero.stage, engine::to_string(config.zero.offload_param.device),
      engine::to_string(config.zero.offload_optimizer.device), precision,
      engine::to_string(config.optimizer.type),
      config.scheduler.type == engine::SchedulerType::none
          ? "(no scheduler)"
          : engine::to_string(config.scheduler.type),
      config.batch.train_batch_size, config.batch.train_micro_batch_size_per_gpu,
      config.batch.gradient_accumulation_steps, world_size);
}

int check(const CheckOptions& options) {
  try {
    const engine::LoadedConfig loaded =
        prepare_run(options.path, options.world_size, options.overrides).loaded;
    for (const auto& warning : loaded.warnings)
      std::fprintf(stderr, "strata: warning: %s\n", warning.c_str());
    for (const auto& note : loaded.notes)
      std::fprintf(stderr, "strata: note: %s\n", note.c_str());
    nlohmann::json resolved = engine::to_json(loaded.config);
    if (options.json) {
      nlohmann::json out = {{"file", options.path},
                            {"valid", true},
                            {"world_size", options.world_size},
                            {"warnings", loaded.warnings},
                            {"notes", loaded.notes},
                            {"config", resolved}};
      fmt::print("{}\n", out.dump(2));
    } else {
      fmt::print("{}: valid ({})\n{}\n", options.path, summary(loaded.config, options.world_size),
                 resolved.dump(2));
    }
    return 0;
  } catch (const engine::ConfigError& error) {
    if (options.json) {
      nlohmann::json out = {{"file", options.path},
                            {"valid", false},
                            {"world_size", options.world_size},
                            {"errors", error.problems()}};
      fmt::print("{}\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      std::fprintf(stderr, "strata: error: %s\n  fix: %s\n", error.what(), error.fix().c_str());
    }
    return 1;
  } catch (const UserError& error) {
    // What train refuses after reading the config: the model, the data, the swap folders.
    if (options.json) {
      nlohmann::json out = {{"file", options.path},
                            {"valid", false},
                            {"world_size", options.world_size},
                            {"errors", {error.what()}},
                            {"fix", error.fix()}};
      fmt::print("{}\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      std::fprintf(stderr, "strata: error: %s\n  fix: %s\n", error.what(), error.fix().c_str());
    }
    return 1;
  }
}

}  // namespace

void add_config_command(CLI::App& app, CommandContext& context) {
  auto* config =
      app.add_subcommand("config", "Work with DeepSpeed JSON configs and Accelerate configs");
  config->require_subcommand(1);
  auto* check_command = config->add_subcommand(
      "check",
      "Load a DeepSpeed JSON config or an Accelerate config and print it resolved, every default "
      "filled in, or every problem in it (exit 0 valid, 1 not valid)");
  auto options = std::make_shared<CheckOptions>();
  check_command
      ->add_option("FILE", options->path, "The DeepSpeed JSON config or Accelerate YAML config")
      ->required();
  check_command->add_flag("--json", options->json,
                          "Print one JSON object {file, valid, config | errors, warnings, notes}");
  check_command
      ->add_option("--world-size", options->world_size,
                   "Ranks (GPUs) the batch rule train = micro x accumulation x ranks assumes")
      ->check(CLI::Range(1, 1 << 20));
  check_command
      ->add_option("--steps", options->overrides.train_steps,
                   "The run's length, as `strata train --steps` gives it (replaces "
                   "strata.train_steps)")
      ->check(CLI::PositiveNumber);
  auto* bf16 = check_command->add_flag("--bf16", options->overrides.bf16,
                                       "As `strata train --bf16`: bf16.enabled \"auto\" or absent "
                                       "becomes true");
  auto* fp16 = check_command->add_flag("--fp16", options->overrides.fp16,
                                       "As `strata train --fp16`: fp16.enabled \"auto\" or absent "
                                       "becomes true");
  bf16->excludes(fp16);
  check_command->callback([options, &context] { context.exit_status = check(*options); });
}

}  // namespace strata::tools
