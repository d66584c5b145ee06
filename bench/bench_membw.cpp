// `strata bench membw`: the memory bound of the CPU optimizer step alone: the loop that reads and
// writes the same arrays in the same pattern as the step, with trivial arithmetic.

#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "base/units.h"
#include "bench/bench.h"
#include "bench/bench_stream.h"
#include "cpu_adam/isa.h"
#include "cpu_adam/optimizer.h"
#include "cpu_adam/workers.h"

namespace strata::tools {
namespace {}  // namespace

namespace bench {

MembwFigure measure_membw(const StreamOptions& options) {
  const Pattern pattern = make_pattern(options);
  MembwFigure measured;
  measured.params = parse_params(options.params, pattern);
  measured.bytes_per_param = pattern.bytes_per_param;
  cpu_adam::Workers workers(
      cpu_adam::WorkersOptions{.threads = options.threads, .numa_node = options.numa_node});
  std::vector<Figure> figures;
  workers.run([&] {
    StreamArrays arrays(pattern, measured.params);
    arrays.fill();
    with_types(pattern, [&]<class G, class H>() {
      figures =
          measure_round_robin({{"membw bound",
                                [&] {
                                  cpu_adam::membw_step<G, H>(arrays.p(), arrays.g<G>(), arrays.m(),
                                                             arrays.v(), arrays.copy<H>());
                                }}},
                              options.steps);
    });
  });
  measured.seconds_per_step = figures[0].seconds_per_step;
  measured.gbps = figures[0].gbps(measured.params, pattern.bytes_per_param);
  measured.threads = workers.thread_count();
  measured.binding = workers.binding();
  return measured;
}

}  // namespace bench

namespace {

void run_bench_membw(const bench::StreamOptions& options) {
  const bench::Pattern pattern = bench::make_pattern(options);
  const bench::MembwFigure bound = bench::measure_membw(options);
  const std::int64_t params = bound.params;
  const double gbps = bound.gbps;
  if (options.json) {
    const nlohmann::json out = {{"params", params},
                                {"threads", bound.threads},
                                {"binding", bound.binding},
                                {"isa", cpu_adam::isa_name(cpu_adam::active_isa())},
                                {"pattern", bench::name_of(pattern.optimizer)},
                                {"grad", bench::name_of(pattern.grad)},
                                {"copy", bench::name_of(pattern.copy)},
                                {"steps", options.steps},
                                {"bytes_per_param", pattern.bytes_per_param},
                                {"bytes_explained", pattern.bytes_explained},
                                {"seconds_per_step", bound.seconds_per_step},
                                {"params_per_s", params / bound.seconds_per_step},
                                {"gbps", gbps}};
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print(
      "strata bench membw: {} pattern over {} parameters, grad {}, copy {}, {} thread(s) "
      "({}), isa {}\n",
      bench::name_of(pattern.optimizer), base::format_count(static_cast<double>(params)),
      bench::name_of(pattern.grad), bench::name_of(pattern.copy), bound.threads, bound.binding,
      cpu_adam::isa_name(cpu_adam::active_isa()));
  fmt::print("bytes: {}\n", pattern.bytes_explained);
  fmt::print("bound: {:.5f} s/step, {} params/s, {:.2f} GB/s (1e9 bytes/s)\n",
             bound.seconds_per_step, base::format_count(params / bound.seconds_per_step), gbps);
}

}  // namespace

void add_bench_membw_command(CLI::App& bench, CommandContext& /*context*/) {
  auto options = std::make_shared<bench::StreamOptions>();
  CLI::App* command = bench.add_subcommand(
      "membw", "Measure the memory bound of the CPU optimizer step (same arrays, trivial math)");
  bench::add_stream_options(*command, *options);
  command->callback([options] { run_bench_membw(*options); });
}

}  // namespace strata::tools
