#pragma once

// The `strata bench` group: one function per component benchmark, each adding its own
// sub-subcommand to the `bench` command. To add one, declare it here and list it in bench.cpp's
// kBenchCommands.

#include <CLI/CLI.hpp>

#include "tools/commands.h"

namespace strata::tools {

void add_bench_adam_command(CLI::App& bench, CommandContext& context);
void add_bench_membw_command(CLI::App& bench, CommandContext& context);
void add_bench_comm_command(CLI::App& bench, CommandContext& context);
void add_bench_h2d_command(CLI::App& bench, CommandContext& context);
void add_bench_offload_command(CLI::App& bench, CommandContext& context);
void add_bench_gemm_command(CLI::App& bench, CommandContext& context);
void add_bench_device_optimizer_command(CLI::App& bench, CommandContext& context);
void add_bench_attention_command(CLI::App& bench, CommandContext& context);
void add_bench_tokenizer_command(CLI::App& bench, CommandContext& context);
void add_bench_decode_command(CLI::App& bench, CommandContext& context);

}  // namespace strata::tools
