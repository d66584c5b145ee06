// `strata bench adam`: times cpu_adam's optimizer step over N parameters beside, in the same run
// and on the same arrays, the memory bound (cpu_adam::membw_step: the same traffic with trivial
// arithmetic) and a plain compiler-vectorised Adam loop.

#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "base/units.h"
#include "bench/bench.h"
#include "bench/bench_plain_adam.h"
#include "bench/bench_stream.h"
#include "cpu_adam/isa.h"
#include "cpu_adam/optimizer.h"
#include "cpu_adam/workers.h"

namespace strata::tools {
namespace {

using bench::Figure;
using bench::OptimizerKind;
using bench::Pattern;
using bench::StreamOptions;

// The kernels' target (docs/benchmarks.md): this fraction of the memory-bandwidth bound.
constexpr double kTargetRatio = 0.9;

// The hyperparameters only need to be realistic: the traffic does not depend on them.
cpu_adam::AdamConfig adam_config(OptimizerKind kind) {
  cpu_adam::AdamConfig config;
  config.adam_w_mode = kind == OptimizerKind::adamw;
  config.weight_decay = kind == OptimizerKind::adamw ? 0.01f : 0.0f;
  return config;
}

template <class G, class H>
void optimizer_step(OptimizerKind kind, std::int64_t t, bench::StreamArrays& arrays) {
  const float grad_scale = 1.0f / 1024;  // as if undoing a loss scale
  switch (kind) {
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      cpu_adam::step<G, H>(adam_config(kind), t, arrays.p(), arrays.g<G>(), arrays.m(), arrays.v(),
                           arrays.copy<H>(), grad_scale);
      return;
    case OptimizerKind::adagrad:
      cpu_adam::step<G, H>(cpu_adam::AdagradConfig{}, t, arrays.p(), arrays.g<G>(), arrays.v(),
                           arrays.copy<H>(), grad_scale);
      return;
    case OptimizerKind::lion:
      cpu_adam::step<G, H>(cpu_adam::LionConfig{}, t, arrays.p(), arrays.g<G>(), arrays.m(),
                           arrays.copy<H>(), grad_scale);
      return;
  }
}

nlohmann::json figure_json(const Figure& figure, std::int64_t params, int bytes_per_param) {
  return {{"seconds_per_step", figure.seconds_per_step},
          {"params_per_s", figure.params_per_s(params)},
          {"gbps", figure.gbps(params, bytes_per_param)}};
}

void print_text(const Pattern& pattern, std::int64_t params, const cpu_adam::Workers& workers,
                const std::vector<Figure>& figures) {
  fmt::print(
      "strata bench adam: {} over {} parameters, grad {}, copy {}, {} thread(s) ({}), "
      "isa {}\n",
      bench::name_of(pattern.optimizer), base::format_count(static_cast<double>(params)),
      bench::name_of(pattern.grad), bench::name_of(pattern.copy), workers.thread_count(),
      workers.binding(), cpu_adam::isa_name(cpu_adam::active_isa()));
  fmt::print("bytes: {}; GB/s = 1e9 bytes/s\n", pattern.bytes_explained);
  fmt::print("{:<22} {:>12} {:>12} {:>9} {:>9}\n", "loop", "s/step", "params/s", "GB/s", "x bound");
  const double bound = figures[0].seconds_per_step;
  for (const Figure& figure : figures) {
    fmt::print("{:<22} {:>12.5f} {:>12} {:>9.2f} {:>9.3f}\n", figure.name, figure.seconds_per_step,
               base::format_count(figure.params_per_s(params)),
               figure.gbps(params, pattern.bytes_per_param), bound / figure.seconds_per_step);
  }
  const double ratio = bound / figures[1].seconds_per_step;
  fmt::print("verdict: strata {} runs at {:.2f}x the memory bound (target >= {:.2f}x): {}\n",
             bench::name_of(pattern.optimizer), ratio, kTargetRatio,
             ratio >= kTargetRatio ? "ok" : "BELOW TARGET");
}

void run_bench_adam(const StreamOptions& options) {
  const Pattern pattern = bench::make_pattern(options);
  const std::int64_t params = bench::parse_params(options.params, pattern);
  cpu_adam::Workers workers(
      cpu_adam::WorkersOptions{.threads = options.threads, .numa_node = options.numa_node});
  const bool with_plain =
      pattern.optimizer == OptimizerKind::adam || pattern.optimizer == OptimizerKind::adamw;
  base::logger("tools").info("bench adam params={} threads={} {}", params, workers.thread_count(),
                             pattern.bytes_explained);
  std::vector<Figure> figures;
  workers.run([&] {
    bench::StreamArrays arrays(pattern, params);
    arrays.fill();
    bench::with_types(pattern, [&]<class G, class H>() {
      std::int64_t strata_steps = 0;
      std::int64_t plain_steps = 0;
      std::vector<std::pair<std::string, std::function<void()>>> loops;
      loops.emplace_back("membw bound", [&] {
        cpu_adam::membw_step<G, H>(arrays.p(), arrays.g<G>(), arrays.m(), arrays.v(),
                                   arrays.copy<H>());
      });
      loops.emplace_back(fmt::format("strata {}", bench::name_of(pattern.optimizer)),
                         [&] { optimizer_step<G, H>(pattern.optimizer, ++strata_steps, arrays); });
      if (with_plain) {
        loops.emplace_back("plain loop", [&] {
          bench::plain_adam_step<G, H>(adam_config(pattern.optimizer), ++plain_steps, arrays.p(),
                                       arrays.g<G>(), arrays.m(), arrays.v(), arrays.copy<H>(),
                                       1.0f / 1024);
        });
      }
      figures = bench::measure_round_robin(loops, options.steps);
    });
  });
  if (!options.json) {
    print_text(pattern, params, workers, figures);
    return;
  }
  const int bytes = pattern.bytes_per_param;
  nlohmann::json out = figure_json(figures[1], params, bytes);
  out["params"] = params;
  out["threads"] = workers.thread_count();
  out["binding"] = workers.binding();
  out["isa"] = cpu_adam::isa_name(cpu_adam::active_isa());
  out["optimizer"] = bench::name_of(pattern.optimizer);
  out["grad"] = bench::name_of(pattern.grad);
  out["copy"] = bench::name_of(pattern.copy);
  out["steps"] = options.steps;
  out["bytes_per_param"] = bytes;
  out["bytes_explained"] = pattern.bytes_explained;
  out["bound"] = figure_json(figures[0], params, bytes);
  out["ratio_to_bound"] = figures[0].seconds_per_step / figures[1].seconds_per_step;
  out["target_ratio"] = kTargetRatio;
  out["plain"] = with_plain ? figure_json(figures[2], params, bytes) : nlohmann::json();
  out["plain_ratio_to_bound"] =
      with_plain ? nlohmann::json(figures[0].seconds_per_step / figures[2].seconds_per_step)
                 : nlohmann::json();
  fmt::print("{}\n", out.dump(2));
}

}  // namespace

void add_bench_adam_command(CLI::App& bench, CommandContext& /*context*/) {
  auto options = std::make_shared<StreamOptions>();
  CLI::App* command = bench.add_subcommand(
      "adam",
      "Time the CPU optimizer step beside the memory bound and a plain loop, in the same run");
  bench::add_stream_options(*command, *options);
  command->callback([options] { run_bench_adam(*options); });
}

}  // namespace strata::tools
