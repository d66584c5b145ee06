// Options, memory pattern, arrays and timing shared by `strata bench adam` and `bench membw`.

#include "bench/bench_stream.h"

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/log.h"
#include "base/units.h"

namespace strata::tools::bench {
namespace {

template <class Kind>
Kind parse_kind(const std::string& text, std::initializer_list<Kind> kinds, const char* option) {
  for (Kind kind : kinds) {
    if (text == name_of(kind)) return kind;
  }
  std::string allowed;
  for (Kind kind : kinds)
    allowed += fmt::format("{}{}", allowed.empty() ? "" : ", ", name_of(kind));
  throw UserError(fmt::format("{} is \"{}\", which is not one of {}", option, text, allowed),
                  fmt::format("pass {} with one of: {}", option, allowed), 2);
}

int element_bytes(GradKind kind) {
  return kind == GradKind::fp32 ? 4 : 2;
}
int element_bytes(CopyKind kind) {
  return kind == CopyKind::none ? 0 : 2;
}

// MemAvailable from /proc/meminfo, in bytes; nullopt where it cannot be read.
std::optional<std::int64_t> available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    std::int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

std::string_view name_of(GradKind kind) {
  switch (kind) {
    case GradKind::fp32:
      return "fp32";
    case GradKind::bf16:
      return "bf16";
    case GradKind::fp16:
      return "fp16";
  }
  return "?";
}

std::string_view name_of(CopyKind kind) {
  switch (kind) {
    case CopyKind::none:
      return "none";
    case CopyKind::bf16:
      return "bf16";
    case CopyKind::fp16:
      return "fp16";
  }
  return "?";
}

std::string_view name_of(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adam:
      return "adam";
    case OptimizerKind::adamw:
      return "adamw";
    case OptimizerKind::adagrad:
      return "adagrad";
    case OptimizerKind::lion:
      return "lion";
  }
  return "?";
}

void add_stream_options(CLI::App& command, StreamOptions& options) {
  command
      .add_option("--params", options.params, "Parameters per step: a count such as 256M or 1e9")
      ->capture_default_str();
  command
      .add_option("--threads", options.threads,
                  "Optimizer threads (0: one per core, or per core of --numa-node)")
      ->capture_default_str();
  command.add_option("--numa-node", options.numa_node,
                     "Bind the threads to this NUMA node's cores (hwloc); default: unbound");
  command.add_option("--grad", options.grad, "Gradient type: fp32, bf16 or fp16")
      ->capture_default_str();
  command
      .add_option("--copy", options.copy, "Parameter copy written for the GPU: bf16, fp16 or none")
      ->capture_default_str();
  command.add_option("--optimizer", options.optimizer, "adam, adamw, adagrad or lion")
      ->capture_default_str();
  command.add_option("--steps", options.steps, "Timed steps after one warm-up step")
      ->capture_default_str();
  command.add_flag("--json", options.json, "Print one JSON document on stdout");
}

Pattern make_pattern(const StreamOptions& options) {
  Pattern pattern{};
  pattern.optimizer = parse_kind(
      options.optimizer,
      {OptimizerKind::adam, OptimizerKind::adamw, OptimizerKind::adagrad, OptimizerKind::lion},
      "--optimizer");
  pattern.grad =
      parse_kind(options.grad, {GradKind::fp32, GradKind::bf16, GradKind::fp16}, "--grad");
  pattern.copy =
      parse_kind(options.copy, {CopyKind::none, CopyKind::bf16, CopyKind::fp16}, "--copy");
  if (options.steps < 1) {
    throw UserError(fmt::format("--steps is {}; at least one timed step is needed", options.steps),
                    "pass --steps 1 or more (5 by default)", 2);
  }
  if (options.threads < 0) {
    throw UserError(fmt::format("--threads is {}; it must be 1 or more, or 0 for one per core",
                                options.threads),
                    "pass --threads 1 or more, or leave it out", 2);
  }
  pattern.uses_m = pattern.optimizer != OptimizerKind::adagrad;
  pattern.uses_v = pattern.optimizer != OptimizerKind::lion;
  const int states = (pattern.uses_m ? 1 : 0) + (pattern.uses_v ? 1 : 0);
  const int read = 4 + element_bytes(pattern.grad) + 4 * states;
  const int written = 4 + 4 * states;
  const int copy = element_bytes(pattern.copy);
  pattern.bytes_per_param = read + written + copy;
  const std::string state_names =
      std::string(pattern.uses_m ? ",m" : "") + std::string(pattern.uses_v ? ",v" : "");
  pattern.bytes_explained = fmt::format(
      "read p,g{} {} B + write p{} {} B{} = {} B per parameter", state_names, read, state_names,
      written, copy > 0 ? fmt::format(" + {} copy {} B", name_of(pattern.copy), copy) : "",
      pattern.bytes_per_param);
  return pattern;
}

std::int64_t parse_params(const std::string& text, const Pattern& pattern) {
  const std::optional<std::int64_t> params = base::parse_count(text);
  if (!params || *params < 1) {
    throw UserError(fmt::format("--params is \"{}\", which is not a positive count", text),
                    "pass --params as a count such as 256M, 1e8 or 1000000", 2);
  }
  // The arrays hold p, g, m, v and the copy once each (bytes read plus copy, not counting the
  // write-back, which goes to the same arrays).
  const std::int64_t states = (pattern.uses_m ? 1 : 0) + (pattern.uses_v ? 1 : 0);
  const std::int64_t bytes_per_param =
      4 + element_bytes(pattern.grad) + 4 * states + element_bytes(pattern.copy);
  const std::optional<std::int64_t> available = available_memory_bytes();
  if (available && *params > (*available * 9 / 10) / bytes_per_param) {
    throw UserError(
        fmt::format("--params {} needs {} of arrays, but this machine has {} available", text,
                    base::format_bytes(static_cast<double>(*params) * bytes_per_param),
                    base::format_bytes(static_cast<double>(*available))),
        fmt::format("pass --params {} or fewer",
                    base::format_count(static_cast<double>(*available * 9 / 10 / bytes_per_param))),
        2);
  }
  return *params;
}

void StreamArrays::Free::operator()(void* block) const {
  std::free(block);
}

void* StreamArrays::allocate(std::size_t bytes) {
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  void* block = std::aligned_alloc(64, rounded);
  if (block == nullptr) {
    throw UserError(fmt::format("could not allocate {} for the benchmark arrays",
                                base::format_bytes(static_cast<double>(rounded))),
                    "pass a smaller --params", 1);
  }
  return block;
}

StreamArrays::StreamArrays(const Pattern& pattern, std::int64_t params)
    : pattern_(pattern), size_(static_cast<std::size_t>(params)) {
  p_.reset(static_cast<float*>(allocate(size_ * sizeof(float))));
  if (pattern.uses_m) m_.reset(static_cast<float*>(allocate(size_ * sizeof(float))));
  if (pattern.uses_v) v_.reset(static_cast<float*>(allocate(size_ * sizeof(float))));
  g_.reset(allocate(size_ * static_cast<std::size_t>(element_bytes(pattern.grad))));
  if (pattern.copy != CopyKind::none) {
    copy_.reset(allocate(size_ * static_cast<std::size_t>(element_bytes(pattern.copy))));
  }
}

void StreamArrays::fill() {
  // Small positive values keep every loop finite and free of denormals for many steps: the
  // membw loop adds g to v, which must stay >= 0 for Adam's sqrt.
  const auto n = static_cast<std::int64_t>(size_);
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(
                        0, (n + cpu_adam::kTileElements - 1) / cpu_adam::kTileElements),
                    [&](const tbb::blocked_range<std::int64_t>& tiles) {
                      for (std::int64_t t = tiles.begin(); t != tiles.end(); ++t) {
                        const std::int64_t end = std::min(n, (t + 1) * cpu_adam::kTileElements);
                        for (std::int64_t i = t * cpu_adam::kTileElements; i < end; ++i) {
                          const float value = 1e-3f * static_cast<float>(1 + i % 97);
                          p_.get()[i] = value;
                          if (m_) m_.get()[i] = 0.0f;
                          if (v_) v_.get()[i] = 0.0f;
                          switch (pattern_.grad) {
                            case GradKind::fp32:
                              static_cast<float*>(g_.get())[i] = value;
                              break;
                            case GradKind::bf16:
                              static_cast<cpu_adam::bf16*>(g_.get())[i] = cpu_adam::to_bf16(value);
                              break;
                            case GradKind::fp16:
                              static_cast<cpu_adam::fp16*>(g_.get())[i] = cpu_adam::to_fp16(value);
                              break;
                          }
                          if (copy_) static_cast<std::uint16_t*>(copy_.get())[i] = 0;
                        }
                      }
                    });
}

std::vector<Figure> measure_round_robin(
    const std::vector<std::pair<std::string, std::function<void()>>>& loops, int steps) {
  std::vector<std::vector<double>> seconds(loops.size());
  auto& log = base::logger("tools");
  for (const auto& [name, loop] : loops) {
    log.info("warm-up loop={}", name);
    loop();
  }
  for (int s = 0; s < steps; ++s) {
    for (std::size_t k = 0; k < loops.size(); ++k) {
      const auto start = std::chrono::steady_clock::now();
      loops[k].second();
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
      seconds[k].push_back(elapsed.count());
    }
    log.info("round {}/{} done", s + 1, steps);
  }
  std::vector<Figure> figures;
  for (std::size_t k = 0; k < loops.size(); ++k) {
    std::vector<double>& times = seconds[k];
    std::sort(times.begin(), times.end());
    figures.push_back(Figure{loops[k].first, times[times.size() / 2]});
  }
  return figures;
}

}  // namespace strata::tools::bench
