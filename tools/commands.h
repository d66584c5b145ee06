#pragma once

#include <CLI/CLI.hpp>

namespace strata::tools {

// What every subcommand can read and set. A subcommand's callback runs inside CLI11's parse and
// reports a non-zero exit status through `exit_status` (or throws a UserError).
struct CommandContext {
  int exit_status = 0;
};

// One function per subcommand file: it adds the subcommand, its options and its callback.
void add_report_command(CLI::App& app, CommandContext& context);
void add_estimate_command(CLI::App& app, CommandContext& context);
void add_config_command(CLI::App& app, CommandContext& context);
void add_train_command(CLI::App& app, CommandContext& context);
void add_eval_command(CLI::App& app, CommandContext& context);
void add_ckpt_command(CLI::App& app, CommandContext& context);
void add_bench_command(CLI::App& app, CommandContext& context);
void add_io_bench_command(CLI::App& app, CommandContext& context);
void add_io_tune_command(CLI::App& app, CommandContext& context);
void add_tokenize_command(CLI::App& app, CommandContext& context);
void add_generate_command(CLI::App& app, CommandContext& context);

}  // namespace strata::tools
