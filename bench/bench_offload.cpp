// `strata bench offload`: times the offloaded optimizer step (engine/zero/optimizer_offload) and,
// in the same run, its stages alone: the optimizer in memory on the same bytes, and reading plus
// writing the same bytes through aio::Engine (an NvmeStore and pool made as the step's, moved
// with the step's own read-ahead/write-behind schedule). The step can be no faster than the
// slower stage: bound_s = max(adam_alone_s, io_alone_s).

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/by_index.h"
#include "base/error.h"
#include "base/log.h"
#include "base/units.h"
#include "bench/bench.h"
#include "cpu_adam/half.h"
#include "cpu_adam/workers.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/optimizer_offload.h"
#include "engine/zero/optimizer_states.h"
#include "gpu/open_device.h"

namespace strata::tools {
namespace {

using engine::OffloadDevice;
using engine::OptimizerConfig;
using engine::OptimizerType;
using engine::ParamCopy;
using engine::StepHyperparameters;
using engine::zero::OptimizerOffload;
using engine::zero::OptimizerOffloadOptions;

struct OffloadBenchOptions {
  std::string params = "64M";
  std::string device = "nvme";
  std::string path;
  std::string sub_group_size = "16M";
  std::string optimizer = "adam";
  int threads = 0;
  int steps = 3;
  std::int64_t buffer_count = 4;
  bool no_pin = false;
  bool no_pipeline = false;
  bool json = false;
  // fp32, bf16 (bf16.bf16_master_weights_and_grads + bf16_optimizer_states: master, gradients
  // and moments in bf16), or both, one after the other in the same run.
  std::string states = "fp32";
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::int64_t count_option(const std::string& text, const char* flag) {
  const auto value = base::parse_count(text);
  if (!value || *value < 1)
    throw UserError(fmt::format("{} {} is not a positive count", flag, text),
                    fmt::format("give {} as a number such as 1000000, 64M or 1G", flag), 2);
  return *value;
}

constexpr std::int64_t kBlock = 4096;

// One step's I/O with the optimizer taken out: the schedule of OptimizerOffload::run_step
// (engine/zero/optimizer_offload.cpp) move for move, so that this is a lower bound of the step
// and not a different I/O pattern. With pipeline_read, reads run `ahead` sub-groups past the one
// being "computed" (every buffer but the current one and, with pipeline_write, the one being
// written); only the read of the very next sub-group may wait for the oldest write to give its
// buffer back, later ones take free buffers only. With pipeline_write, a sub-group's write stays
// in flight while the next ones are read; without it each write is waited for at once.
class IoSchedule {
 public:
  IoSchedule(engine::memory::NvmeStore& store, engine::memory::PinnedPool& pool,
             const base::ByIndex<std::int64_t>& extents, bool pipeline_read, bool pipeline_write)
      : store_(store), pool_(pool), extents_(extents), pipeline_write_(pipeline_write) {
    const std::int64_t count = pool.buffer_count();
    ahead_ = pipeline_read ? std::max<std::int64_t>(1, count - 1 - (pipeline_write ? 1 : 0)) : 0;
  }

  void pass() {
    const int n = extents_.size();
    next_read_ = 0;
    for (int g = 0; g < n; ++g) {
      if (reads_.empty()) issue_read(buffer(true, true));
      while (next_read_ < n && next_read_ <= g + ahead_) {
        engine::memory::PinnedPool::Lease lease = buffer(next_read_ == g + 1, false);
        if (!lease) break;
        issue_read(std::move(lease));
      }
      InFlight current = std::move(reads_.front());
      reads_.pop_front();
      store_.wait(current.ticket);
      current.ticket = store_.submit_write(g, span_of(current.lease, g));
      if (pipeline_write_) {
        writes_.push_back(std::move(current));
      } else {
        store_.wait(current.ticket);
      }
    }
    while (!writes_.empty()) {
      store_.wait(writes_.front().ticket);
      writes_.pop_front();
    }
  }

 private:
  struct InFlight {
    engine::memory::PinnedPool::Lease lease;
    aio::Ticket ticket;
  };

  std::span<std::byte> span_of(const engine::memory::PinnedPool::Lease& lease, int g) const {
    return lease.bytes().first(static_cast<std::size_t>(extents_[g]));
  }
  // As run_step's: a free buffer, else (when `wait_for_write`) the oldest write's once it is
  // done, else (when `must`) the next one given back.
  engine::memory::PinnedPool::Lease buffer(bool wait_for_write, bool must) {
    engine::memory::PinnedPool::Lease lease = pool_.try_acquire();
    if (!lease && wait_for_write && !writes_.empty()) {
      InFlight oldest = std::move(writes_.front());
      writes_.pop_front();
      store_.wait(oldest.ticket);
      lease = std::move(oldest.lease);
    }
    if (!lease && must) lease = pool_.acquire();
    return lease;
  }
  void issue_read(engine::memory::PinnedPool::Lease lease) {
    aio::Ticket ticket = store_.submit_read(next_read_, span_of(lease, next_read_));
    reads_.push_back({std::move(lease), ticket});
    ++next_read_;
  }

  engine::memory::NvmeStore& store_;
  engine::memory::PinnedPool& pool_;
  const base::ByIndex<std::int64_t>& extents_;
  bool pipeline_write_;
  std::int64_t ahead_ = 0;
  int next_read_ = 0;
  std::deque<InFlight> reads_;
  std::deque<InFlight> writes_;
};

// Reads and writes back every sub-group's extent (the bytes the offloaded step moves) with the
// step's schedule (IoSchedule), through a store and pool made as the step makes its own: the
// same buffer_count buffers of the largest extent, pinned or not, registered with the rings when
// pinned, the same aio options (block size, queue depth, rings, O_DIRECT) and CRC32C on every
// block written and checked on every block read.
class IoAlone {
 public:
  IoAlone(gpu::Device& device, const OffloadBenchOptions& options,
          const base::ByIndex<std::int64_t>& extents)
      : pool_(device, options.buffer_count,
              std::max(*std::max_element(extents.begin(), extents.end()), kBlock),
              {!options.no_pin, "bench io buffers"}),
        store_(store_options(options, pool_), extents.items()),
        schedule_(store_, pool_, extents, !options.no_pipeline, !options.no_pipeline) {
    // Fill the extents once so that reads see written, checksummed blocks.
    engine::memory::PinnedPool::Lease lease = pool_.acquire();
    std::memset(lease.bytes().data(), 0, lease.bytes().size());
    for (int g = 0; g < extents.size(); ++g)
      store_.wait(
          store_.submit_write(g, lease.bytes().first(static_cast<std::size_t>(extents[g]))));
  }

  // One step's I/O; seconds.
  double pass() {
    const auto start = std::chrono::steady_clock::now();
    schedule_.pass();
    return seconds_since(start);
  }

 private:
  static engine::memory::NvmeStoreOptions store_options(const OffloadBenchOptions& options,
                                                        const engine::memory::PinnedPool& pool) {
    engine::memory::NvmeStoreOptions result;
    result.nvme_path = options.path;
    result.job_name = "bench-offload-io";
    result.registered = pool.pinned_arena();
    return result;
  }

  engine::memory::PinnedPool pool_;
  engine::memory::NvmeStore store_;
  IoSchedule schedule_;
};

// One configuration's figures: the step, its stages alone, and the bytes it moves.
struct Measured {
  std::string states;
  double step_s = 0;
  double adam_s = 0;
  double io_s = 0;
  base::ByIndex<std::int64_t> extents;  // bytes by sub-group
  engine::memory::ResidencyCounters counters;
  std::int64_t moved() const {
    std::int64_t bytes = 0;
    for (std::int64_t extent : extents)
      bytes += extent;
    return bytes;
  }
};

// Gradients of the master's type, 1e-3 (and 0.5 for the master: both exact in bf16).
std::vector<std::byte> filled_gradients(engine::StateTypes types, std::size_t count) {
  std::vector<std::byte> grads(count * static_cast<std::size_t>(types.grad_bytes()));
  for (std::size_t i = 0; i < count; ++i) {
    if (types.bf16_master_and_grads) {
      reinterpret_cast<cpu_adam::bf16*>(grads.data())[i] = cpu_adam::to_bf16(1e-3f);
    } else {
      reinterpret_cast<float*>(grads.data())[i] = 1e-3f;
    }
  }
  return grads;
}

// The offloaded step, and with NVMe the I/O alone between its steps: fills `result`'s step_s,
// io_s, extents and counters.
void measure_offloaded_step(const OffloadBenchOptions& options, engine::StateTypes types,
                            const engine::Optimizer& optimizer, gpu::Device& device,
                            std::int64_t sub_group_size, std::span<const std::byte> grads,
                            std::vector<std::uint16_t>& copy, Measured& result) {
  const bool nvme = options.device == "nvme";
  const std::size_t count = copy.size();
  const std::vector<float> master(count, 0.5f);
  StepHyperparameters hyper;
  hyper.lr = 1e-4;
  OptimizerOffloadOptions offload_options;
  offload_options.device = nvme ? OffloadDevice::nvme : OffloadDevice::cpu;
  offload_options.sub_group_size = sub_group_size;
  offload_options.pipeline_read = !options.no_pipeline;
  offload_options.pipeline_write = !options.no_pipeline;
  offload_options.buffer_count = options.buffer_count;
  offload_options.pin_memory = !options.no_pin;
  offload_options.types = types;
  offload_options.nvme.nvme_path = options.path;
  offload_options.nvme.job_name = "bench-offload";
  // The memory the engine would lend the states: a pool, a book and (nvme) a store.
  engine::memory::PinnedPool pool(device);
  std::unique_ptr<engine::memory::NvmeStore> store;
  if (nvme) store = std::make_unique<engine::memory::NvmeStore>(offload_options.nvme);
  engine::memory::Residency book;
  offload_options.pool = &pool;
  offload_options.book = &book;
  offload_options.store = store.get();
  engine::zero::OptimizerStates states(optimizer, static_cast<std::int64_t>(count),
                                       offload_options);
  OptimizerOffload offload(optimizer, states, offload_options);
  pool.open();
  if (store) store->open(pool.pinned_arena());
  states.open();
  engine::zero::fill_with_masters(states, master);
  result.extents.items() = states.plan().extent_bytes;
  // I/O alone alternates with the step, a pass after each step, both swap files on the disk
  // at once, so that drift of the disk hits both alike. Run after all the steps instead,
  // the same passes came out 15-20% slower than the step on the development machine's
  // virtual disk (64M params: 1.02-1.04 s against 0.89 s; 0.88 s when run before the steps).
  std::optional<IoAlone> io;
  if (nvme) io.emplace(device, options, result.extents);
  engine::zero::PartitionGrads source(grads, types.grad_bytes());
  engine::zero::PartitionMemory sink(std::as_writable_bytes(std::span(copy)), 2);
  std::vector<double> seconds;
  std::vector<double> io_seconds;
  for (int step = 0; step <= options.steps; ++step) {  // step 0 (and pass 0) warm up
    hyper.step = step + 1;
    const auto start = std::chrono::steady_clock::now();
    offload.step(hyper, engine::zero::StepIo{&source, ParamCopy::bf16, &sink});
    if (step > 0) seconds.push_back(seconds_since(start));
    if (io) {
      const double pass_s = io->pass();
      if (step > 0) io_seconds.push_back(pass_s);
    }
  }
  result.step_s = median(seconds);
  if (io) result.io_s = median(io_seconds);
  result.counters = states.counters();
}

// The optimizer alone: the same arrays in memory, stepped sub-group by sub-group.
double measure_adam_alone(const OffloadBenchOptions& options, engine::StateTypes types,
                          const engine::Optimizer& optimizer, std::int64_t sub_group_size,
                          std::span<const std::byte> grads, std::vector<std::uint16_t>& copy) {
  const std::size_t count = copy.size();
  const auto n = static_cast<std::int64_t>(count);
  StepHyperparameters hyper;
  hyper.lr = 1e-4;
  const std::size_t moment_bytes = count * static_cast<std::size_t>(types.moment_bytes());
  std::vector<std::byte> params(count * static_cast<std::size_t>(types.master_bytes()));
  for (std::size_t i = 0; i < count; ++i) {
    if (types.bf16_master_and_grads) {
      reinterpret_cast<cpu_adam::bf16*>(params.data())[i] = cpu_adam::to_bf16(0.5f);
    } else {
      reinterpret_cast<float*>(params.data())[i] = 0.5f;
    }
  }
  std::vector<std::byte> exp_avg(moment_bytes), exp_avg_sq(moment_bytes);
  const auto groups = engine::zero::make_sub_groups(n, sub_group_size);
  std::vector<double> seconds;
  for (int step = 0; step <= options.steps; ++step) {
    hyper.step = step + 1;
    const auto start = std::chrono::steady_clock::now();
    for (const auto& range : groups) {
      auto slice = [&](auto& bytes, std::int64_t element) {
        return std::span(bytes).subspan(static_cast<std::size_t>(range.begin * element),
                                        static_cast<std::size_t>(range.size() * element));
      };
      const engine::StateArrays arrays{
          slice(params, types.master_bytes()), std::as_bytes(slice(grads, types.grad_bytes())),
          slice(exp_avg, types.moment_bytes()), slice(exp_avg_sq, types.moment_bytes())};
      optimizer.step(hyper, types, arrays, range.size(), ParamCopy::bf16,
                     std::span(copy).subspan(static_cast<std::size_t>(range.begin),
                                             static_cast<std::size_t>(range.size())));
    }
    if (step > 0) seconds.push_back(seconds_since(start));
  }
  return median(seconds);
}

Measured measure(const OffloadBenchOptions& options, engine::StateTypes types,
                 const engine::Optimizer& optimizer, gpu::Device& device, std::int64_t n,
                 std::int64_t sub_group_size) {
  const auto count = static_cast<std::size_t>(n);
  Measured result;
  result.states = types.all_fp32() ? "fp32" : "bf16";
  const std::vector<std::byte> grads = filled_gradients(types, count);
  std::vector<std::uint16_t> copy(count);
  measure_offloaded_step(options, types, optimizer, device, sub_group_size, grads, copy, result);
  result.adam_s = measure_adam_alone(options, types, optimizer, sub_group_size, grads, copy);
  return result;
}

// The state types --states asks for, fp32 first.
std::vector<engine::StateTypes> state_types_of(const OffloadBenchOptions& options) {
  std::vector<engine::StateTypes> runs;
  if (options.states == "fp32" || options.states == "both") runs.push_back({});
  if (options.states == "bf16" || options.states == "both") runs.push_back({true, true});
  if (runs.empty())
    throw UserError(fmt::format("--states {} is not fp32, bf16 or both", options.states),
                    "pass --states fp32, --states bf16 or --states both", 2);
  return runs;
}

OptimizerConfig optimizer_config_of(const OffloadBenchOptions& options) {
  OptimizerConfig config;
  if (options.optimizer == "adam")
    config.type = OptimizerType::adam;
  else if (options.optimizer == "adamw")
    config.type = OptimizerType::adamw;
  else
    throw UserError(fmt::format("--optimizer {} is not adam or adamw", options.optimizer),
                    "pass --optimizer adam or --optimizer adamw", 2);
  return config;
}

// The step's target: this close to the slower of the optimizer alone and the I/O alone.
double target_ratio(const OffloadBenchOptions& options) {
  return options.device == "nvme" ? 1.10 : 1.05;
}

nlohmann::json offload_json(const OffloadBenchOptions& options, std::int64_t n,
                            std::int64_t sub_group_size, int threads, const Measured& m) {
  const double bound_s = std::max(m.adam_s, m.io_s);
  const bool nvme = options.device == "nvme";
  return nlohmann::json{
      {"params", n},
      {"device", options.device},
      {"optimizer", options.optimizer},
      {"states", m.states},
      {"sub_group_size", sub_group_size},
      {"sub_groups", m.extents.size()},
      {"buffer_count", options.buffer_count},
      {"pinned", !options.no_pin},
      {"pipeline", !options.no_pipeline},
      {"threads", threads},
      {"steps", options.steps},
      {"seconds_per_step", m.step_s},
      {"adam_alone_s", m.adam_s},
      {"io_alone_s", m.io_s},
      {"bound_s", bound_s},
      {"ratio_to_bound", m.step_s / bound_s},
      {"target_ratio", target_ratio(options)},
      {"state_bytes", m.moved()},
      // Per step, from the residency counters (the initial write and
      // the warm-up step taken out).
      {"nvme_read_bytes_per_step",
       m.counters.moved(engine::memory::Direction::nvme_read) / (options.steps + 1)},
      {"nvme_write_bytes_per_step",
       nvme ? (m.counters.moved(engine::memory::Direction::nvme_write) - m.moved()) /
                  (options.steps + 1)
            : 0}};
}

void print_measured(const OffloadBenchOptions& options, std::int64_t n, std::int64_t sub_group_size,
                    int threads, const Measured& m) {
  const bool nvme = options.device == "nvme";
  const double bound_s = std::max(m.adam_s, m.io_s);
  const double ratio = m.step_s / bound_s;
  fmt::print(
      "strata bench offload: {} {} params, {} states on {}, sub-groups of {} ({}), "
      "{} buffers{}, {} thread(s)\n",
      options.optimizer, base::format_count(static_cast<double>(n)), m.states, options.device,
      base::format_count(static_cast<double>(sub_group_size)), m.extents.size(),
      options.buffer_count, options.no_pin ? " (not pinned)" : "", threads);
  fmt::print("state bytes per step: {} read + {} written\n",
             base::format_bytes(nvme ? static_cast<double>(m.moved()) : 0.0),
             base::format_bytes(nvme ? static_cast<double>(m.moved()) : 0.0));
  fmt::print("{:<18} {:>10.4f} s\n", "seconds_per_step", m.step_s);
  fmt::print("{:<18} {:>10.4f} s\n", "adam_alone_s", m.adam_s);
  fmt::print("{:<18} {:>10.4f} s\n", "io_alone_s", m.io_s);
  fmt::print("{:<18} {:>10.4f} s\n", "bound_s", bound_s);
  fmt::print("verdict: step = {:.3f}x bound (target <= {:.2f}x): {}\n", ratio,
             target_ratio(options), ratio <= target_ratio(options) ? "ok" : "ABOVE TARGET");
}

void run_bench_offload(const OffloadBenchOptions& options) {
  const std::int64_t n = count_option(options.params, "--params");
  const std::int64_t sub_group_size = count_option(options.sub_group_size, "--sub-group-size");
  if (options.device != "cpu" && options.device != "nvme")
    throw UserError(fmt::format("--device {} is not cpu or nvme", options.device),
                    "pass --device cpu or --device nvme", 2);
  if (options.device == "nvme" && options.path.empty())
    throw UserError("--device nvme needs --path", "pass --path DIR, a directory on the NVMe drive",
                    2);
  const std::vector<engine::StateTypes> runs = state_types_of(options);
  const engine::Optimizer optimizer(optimizer_config_of(options));
  cpu_adam::Workers workers(cpu_adam::WorkersOptions{.threads = options.threads});
  auto device = gpu::create_host_device({});

  std::vector<Measured> results;
  workers.run([&] {
    for (const engine::StateTypes& types : runs)
      results.push_back(measure(options, types, optimizer, *device, n, sub_group_size));
  });
  const int threads = workers.thread_count();
  if (options.json) {
    if (results.size() == 1) {
      fmt::print("{}\n",
                 offload_json(options, n, sub_group_size, threads, results.front()).dump(2));
    } else {
      nlohmann::json out;
      for (const Measured& m : results)
        out[m.states] = offload_json(options, n, sub_group_size, threads, m);
      fmt::print("{}\n", out.dump(2));
    }
    return;
  }
  for (const Measured& m : results)
    print_measured(options, n, sub_group_size, threads, m);
  if (results.size() == 2) {
    fmt::print("bf16 states: {:.2f}x the fp32 states' step time, {:.2f}x their bytes\n",
               results[1].step_s / results[0].step_s,
               static_cast<double>(results[1].moved()) / static_cast<double>(results[0].moved()));
  }
}

}  // namespace

void add_bench_offload_command(CLI::App& bench, CommandContext& /*context*/) {
  auto options = std::make_shared<OffloadBenchOptions>();
  CLI::App* command = bench.add_subcommand(
      "offload",
      "Times the offloaded optimizer step beside its stages alone (optimizer in memory; reading "
      "and writing the same bytes through aio) and reports the ratio to the slower one");
  command->add_option("--params", options->params, "parameters in the partition (64M, 512M)")
      ->capture_default_str();
  command->add_option("--device", options->device, "where the optimizer states live: cpu|nvme")
      ->capture_default_str();
  command->add_option("--path", options->path, "swap directory for --device nvme");
  command->add_option("--sub-group-size", options->sub_group_size, "elements per sub-group")
      ->capture_default_str();
  command->add_option("--optimizer", options->optimizer, "adam|adamw")->capture_default_str();
  command->add_option("--threads", options->threads, "optimizer threads (0: every core)")
      ->capture_default_str();
  command->add_option("--steps", options->steps, "timed steps (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  command
      ->add_option("--buffer-count", options->buffer_count, "swap buffers (sub-groups in flight)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  command->add_flag("--no-pin", options->no_pin,
                    "plain aligned memory for the swap buffers (no RLIMIT_MEMLOCK needed)");
  command->add_flag("--no-pipeline", options->no_pipeline,
                    "pipeline_read and pipeline_write off: strictly read, compute, write");
  command
      ->add_option("--states", options->states,
                   "fp32, bf16 (master weights, gradients and moments in bf16) or both, one "
                   "after the other in the same run")
      ->capture_default_str();
  command->add_flag("--json", options->json, "one JSON object instead of text");
  command->callback([options] { run_bench_offload(*options); });
}

}  // namespace strata::tools
