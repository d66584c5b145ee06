// `strata bench comm`: the collectives of gpu::Comm on the host device, timed per kind, beside
// the bound measured in the same run: memcpy bandwidth with every rank copying at once (ranks on
// one machine move collective data through shared memory, so no collective beats a copy).
//
// Run it under the launcher to time the MPI backend:
//   mpirun --allow-run-as-root -np 4 strata bench comm --size 64MiB --type bfloat16

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/units.h"
#include "bench/bench.h"
#include "gpu/comm.h"
#include "gpu/open_device.h"
#include "gpu/process_group.h"

namespace strata::tools {
namespace {

struct CommBenchOptions {
  std::string size = "64MiB";
  std::string type = "bfloat16";
  int steps = 10;
  bool json = false;
};

// One timed collective: nccl-tests' conventions, so figures compare with theirs. `bytes` is the
// larger buffer of the collective (all_gather's receive, reduce_scatter's send); algbw is
// bytes / time, busbw scales it by what each rank must move over the wire in the best algorithm.
struct CommFigure {
  gpu::CollectiveKind kind;
  double seconds_per_op = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
};

double bus_factor(gpu::CollectiveKind kind, int ranks) {
  const double n = ranks;
  switch (kind) {
    case gpu::CollectiveKind::all_gather:
    case gpu::CollectiveKind::reduce_scatter:
      return (n - 1) / n;
    case gpu::CollectiveKind::all_reduce:
      return 2 * (n - 1) / n;
    case gpu::CollectiveKind::broadcast:
      return 1;
  }
  return 1;
}

gpu::DataType parse_type(const std::string& name) {
  for (gpu::DataType type : {gpu::DataType::float32, gpu::DataType::bfloat16,
                             gpu::DataType::float16, gpu::DataType::int32}) {
    if (gpu::to_string(type) == name) return type;
  }
  throw UserError("--type " + name + " is not a collective data type",
                  "use float32, bfloat16, float16 or int32", 2);
}

// Best memcpy time of `bytes` over `steps` copies, in seconds.
double memcpy_seconds(std::int64_t bytes, int steps) {
  std::vector<std::byte> source(static_cast<std::size_t>(bytes), std::byte{1});
  std::vector<std::byte> target(static_cast<std::size_t>(bytes));
  double best = 1e30;
  for (int step = 0; step <= steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(target.data(), source.data(), source.size());
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (step > 0) best = std::min(best, elapsed.count());  // step 0 faults the pages in
  }
  return best;
}

class CommBench {
 public:
  CommBench(gpu::World& world, gpu::DataType type, std::int64_t bytes)
      : world_(world), type_(type) {
    const std::int64_t element_bytes = gpu::size_bytes(type);
    const int ranks = world.world_size();
    count_per_rank_ = std::max<std::int64_t>(1, bytes / element_bytes / ranks);
    total_bytes_ = count_per_rank_ * ranks * element_bytes;
    gpu::DeviceOptions options;
    options.memory_budget_bytes = 2 * total_bytes_ + (std::int64_t{16} << 20);
    device_ = gpu::create_host_device(options);
    stream_ = device_->create_stream("comm");
    comm_ = gpu::create_comm(world, *device_);
    full_ = device_->allocate(total_bytes_, "bench comm full buffer");
    shard_ = device_->allocate(count_per_rank_ * element_bytes, "bench comm shard");
    stream_->fill_zero(full_.data(), full_.bytes());
    stream_->fill_zero(shard_.data(), shard_.bytes());
    stream_->synchronize();
  }

  ~CommBench() {
    stream_->synchronize();
    comm_.reset();
  }
  CommBench(const CommBench&) = delete;
  CommBench& operator=(const CommBench&) = delete;

  std::int64_t total_bytes() const { return total_bytes_; }
  gpu::Comm& comm() { return *comm_; }

  // Times `steps` back-to-back collectives of `kind` after one warm-up; the slowest rank's time
  // counts, as a step waits for it.
  CommFigure measure(gpu::CollectiveKind kind, int steps) {
    enqueue(kind);
    stream_->synchronize();
    comm_->barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < steps; ++step)
      enqueue(kind);
    stream_->synchronize();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    const double seconds = slowest_rank(elapsed.count()) / steps;
    CommFigure figure{kind};
    figure.seconds_per_op = seconds;
    figure.algbw_gbps = static_cast<double>(total_bytes_) / std::max(seconds, 1e-12) / 1e9;
    figure.busbw_gbps = figure.algbw_gbps * bus_factor(kind, world_.world_size());
    return figure;
  }

 private:
  void enqueue(gpu::CollectiveKind kind) {
    switch (kind) {
      case gpu::CollectiveKind::all_gather:
        return comm_->all_gather(*stream_, shard_.data(), full_.data(), count_per_rank_, type_);
      case gpu::CollectiveKind::reduce_scatter:
        return comm_->reduce_scatter(*stream_, full_.data(), shard_.data(), count_per_rank_, type_,
                                     gpu::ReduceOp::sum);
      case gpu::CollectiveKind::all_reduce:
        return comm_->all_reduce(*stream_, full_.data(), count_per_rank_ * world_.world_size(),
                                 type_, gpu::ReduceOp::sum);
      case gpu::CollectiveKind::broadcast:
        return comm_->broadcast(*stream_, full_.data(), count_per_rank_ * world_.world_size(),
                                type_, 0);
    }
  }

  double slowest_rank(double seconds) {
    gpu::PinnedBuffer host = device_->allocate_pinned(sizeof(std::int64_t));
    gpu::DeviceBuffer value = device_->allocate(sizeof(std::int64_t), "bench comm time");
    *host.as<std::int64_t>() = static_cast<std::int64_t>(seconds * 1e9);
    stream_->copy(value.data(), host.data(), sizeof(std::int64_t), gpu::CopyKind::host_to_device);
    comm_->all_reduce(*stream_, value.data(), 1, gpu::DataType::int64, gpu::ReduceOp::max);
    stream_->copy(host.data(), value.data(), sizeof(std::int64_t), gpu::CopyKind::device_to_host);
    stream_->synchronize();
    return static_cast<double>(*host.as<std::int64_t>()) / 1e9;
  }

  gpu::World& world_;
  gpu::DataType type_;
  std::int64_t count_per_rank_ = 0;
  std::int64_t total_bytes_ = 0;
  std::unique_ptr<gpu::Device> device_;
  std::unique_ptr<gpu::Stream> stream_;
  std::unique_ptr<gpu::Comm> comm_;
  gpu::DeviceBuffer full_;
  gpu::DeviceBuffer shard_;
};

void print_figures(const CommBenchOptions& options, const gpu::World& world,
                   std::string_view backend, std::int64_t bytes, double memcpy_gbps,
                   const std::vector<CommFigure>& figures) {
  if (options.json) {
    nlohmann::json collectives = nlohmann::json::array();
    for (const CommFigure& figure : figures) {
      collectives.push_back({{"collective", gpu::to_string(figure.kind)},
                             {"seconds_per_op", figure.seconds_per_op},
                             {"algbw_gbps", figure.algbw_gbps},
                             {"busbw_gbps", figure.busbw_gbps},
                             {"busbw_over_memcpy", figure.busbw_gbps / memcpy_gbps}});
    }
    const nlohmann::json out = {
        {"ranks", world.world_size()}, {"backend", backend},
        {"type", options.type},        {"bytes", bytes},
        {"steps", options.steps},      {"memcpy_gbps_per_rank", memcpy_gbps},
        {"collectives", collectives}};
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("strata bench comm: {} rank(s), {} backend, {}, {} per collective, {} steps\n",
             world.world_size(), backend, options.type,
             base::format_bytes(static_cast<double>(bytes)), options.steps);
  fmt::print("bound: memcpy {:.2f} GB/s per rank, all ranks copying at once (1e9 bytes/s)\n",
             memcpy_gbps);
  fmt::print("{:<15} {:>12} {:>14} {:>14} {:>16}\n", "collective", "ms/op", "algbw GB/s",
             "busbw GB/s", "busbw/memcpy");
  for (const CommFigure& figure : figures) {
    fmt::print("{:<15} {:>12.3f} {:>14.2f} {:>14.2f} {:>16.2f}\n", gpu::to_string(figure.kind),
               figure.seconds_per_op * 1e3, figure.algbw_gbps, figure.busbw_gbps,
               figure.busbw_gbps / memcpy_gbps);
  }
}

void run_bench_comm(const CommBenchOptions& options) {
  const std::optional<std::int64_t> bytes = base::parse_bytes(options.size);
  if (!bytes || *bytes <= 0) {
    throw UserError("--size " + options.size + " is not a positive byte size",
                    "write it like 64MiB, 1G or 4096", 2);
  }
  const gpu::DataType type = parse_type(options.type);
  gpu::World world;
  CommBench bench(world, type, *bytes);
  const double memcpy_seconds_per_copy = memcpy_seconds(bench.total_bytes(), options.steps);
  std::vector<CommFigure> figures;
  for (gpu::CollectiveKind kind :
       {gpu::CollectiveKind::all_gather, gpu::CollectiveKind::reduce_scatter,
        gpu::CollectiveKind::all_reduce, gpu::CollectiveKind::broadcast}) {
    figures.push_back(bench.measure(kind, options.steps));
  }
  const double memcpy_gbps =
      static_cast<double>(bench.total_bytes()) / memcpy_seconds_per_copy / 1e9;
  if (world.rank() == 0) {
    print_figures(options, world, bench.comm().backend(), bench.total_bytes(), memcpy_gbps,
                  figures);
  }
}

}  // namespace

void add_bench_comm_command(CLI::App& bench, CommandContext& /*context*/) {
  auto options = std::make_shared<CommBenchOptions>();
  CLI::App* command = bench.add_subcommand(
      "comm",
      "Time the collectives (all_gather, reduce_scatter, all_reduce, broadcast) beside memcpy; "
      "run under mpirun for several ranks");
  command->add_option("--size", options->size,
                      "bytes of the larger buffer of each collective (64MiB, 1G, ...)");
  command->add_option("--type", options->type, "float32, bfloat16, float16 or int32");
  command->add_option("--steps", options->steps, "collectives timed per kind")
      ->check(CLI::PositiveNumber);
  command->add_flag("--json", options->json, "one JSON document on stdout");
  command->callback([options] { run_bench_comm(*options); });
}

}  // namespace strata::tools
