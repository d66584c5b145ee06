// `strata bench`: component benchmarks, each a sub-subcommand in its own file.

#include "bench/bench.h"

namespace strata::tools {
namespace {

using AddBenchCommand = void (*)(CLI::App& bench, CommandContext& context);

// One line per benchmark.
constexpr AddBenchCommand kBenchCommands[] = {
    add_bench_adam_command,      add_bench_membw_command,
    add_bench_comm_command,      add_bench_h2d_command,
    add_bench_offload_command,   add_bench_gemm_command,
    add_bench_attention_command, add_bench_device_optimizer_command,
    add_bench_tokenizer_command, add_bench_decode_command,
};

}  // namespace

void add_bench_command(CLI::App& app, CommandContext& context) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Component benchmarks, each figure beside its bound measured in the same run");
  bench->require_subcommand(1);
  for (AddBenchCommand add : kBenchCommands)
    add(*bench, context);
}

}  // namespace strata::tools
