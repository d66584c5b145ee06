#pragma once

// What `strata bench adam` and `strata bench membw` share: their options, the memory pattern of
// one optimizer step (which arrays, which element types, how many bytes move per parameter), the
// arrays themselves (64-byte aligned, first touched by the threads that will use them), and
// timing by the median of several steps.

#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "cpu_adam/half.h"
#include "cpu_adam/optimizer.h"
#include "cpu_adam/workers.h"

namespace strata::tools::bench {

enum class GradKind { fp32, bf16, fp16 };
enum class CopyKind { none, bf16, fp16 };
enum class OptimizerKind { adam, adamw, adagrad, lion };

struct StreamOptions {
  std::string params = "256M";
  int threads = 0;
  std::optional<int> numa_node;
  std::string grad = "fp32";
  std::string copy = "bf16";
  std::string optimizer = "adam";
  int steps = 5;
  bool json = false;
};

// Adds --params, --threads, --numa-node, --grad, --copy, --optimizer, --steps and --json.
void add_stream_options(CLI::App& command, StreamOptions& options);

// The traffic of one step: which arrays it reads and writes and how many bytes per parameter.
struct Pattern {
  OptimizerKind optimizer;
  GradKind grad;
  CopyKind copy;
  bool uses_m;
  bool uses_v;
  int bytes_per_param;
  std::string bytes_explained;  // "read p,g,m,v 16 B + write p,m,v 12 B + bf16 copy 2 B = 30 B"
};

// Checks the options (UserError, exit status 2, naming the option) and returns the pattern.
Pattern make_pattern(const StreamOptions& options);

// --params as a count (256M, 1e9, ...); UserError (exit status 2) when it is not one or is 0, or
// when the arrays would not fit in the memory this machine has available.
std::int64_t parse_params(const std::string& text, const Pattern& pattern);

std::string_view name_of(GradKind kind);
std::string_view name_of(CopyKind kind);
std::string_view name_of(OptimizerKind kind);

// p, g, m, v and the parameter copy for `params` elements, 64-byte aligned; arrays the pattern
// does not use are empty. fill() writes small positive values from inside the workers' arena, so
// each page is first touched by a thread that will stream it.
class StreamArrays {
 public:
  StreamArrays(const Pattern& pattern, std::int64_t params);
  void fill();

  std::span<float> p() { return {p_.get(), size_}; }
  std::span<float> m() { return {m_.get(), m_ ? size_ : 0}; }
  std::span<float> v() { return {v_.get(), v_ ? size_ : 0}; }
  template <class G>
  std::span<const G> g() {
    return {static_cast<const G*>(g_.get()), size_};
  }
  template <class H>
  std::span<H> copy() {
    if constexpr (std::is_same_v<H, cpu_adam::NoCopy>) {
      return {};
    } else {
      return {static_cast<H*>(copy_.get()), size_};
    }
  }

 private:
  struct Free {
    void operator()(void* block) const;
  };
  template <class T>
  using Block = std::unique_ptr<T, Free>;
  static void* allocate(std::size_t bytes);

  const Pattern pattern_;
  std::size_t size_;
  Block<float> p_, m_, v_;
  Block<void> g_, copy_;
};

// Calls f.template operator()<G, H>() with the element types the pattern names.
template <class F>
void with_types(const Pattern& pattern, F&& f) {
  const auto with_copy = [&]<class G>() {
    switch (pattern.copy) {
      case CopyKind::none:
        return f.template operator()<G, cpu_adam::NoCopy>();
      case CopyKind::bf16:
        return f.template operator()<G, cpu_adam::bf16>();
      case CopyKind::fp16:
        return f.template operator()<G, cpu_adam::fp16>();
    }
  };
  switch (pattern.grad) {
    case GradKind::fp32:
      return with_copy.template operator()<float>();
    case GradKind::bf16:
      return with_copy.template operator()<cpu_adam::bf16>();
    case GradKind::fp16:
      return with_copy.template operator()<cpu_adam::fp16>();
  }
}

// One measured loop: the median seconds of its timed steps.
struct Figure {
  std::string name;
  double seconds_per_step = 0.0;
  double params_per_s(std::int64_t params) const { return params / seconds_per_step; }
  double gbps(std::int64_t params, int bytes_per_param) const {
    return params_per_s(params) * bytes_per_param / 1e9;
  }
};

// Runs each loop once to warm up, then `steps` rounds in which every loop runs once (so noise
// from other processes falls on all of them alike); returns each loop's median.
std::vector<Figure> measure_round_robin(
    const std::vector<std::pair<std::string, std::function<void()>>>& loops, int steps);

// `strata bench membw`'s figure: the memory bound of the optimizer step's pattern (the median
// step over `params` parameters), what the decode benchmark sets its bound by on the host.
struct MembwFigure {
  std::int64_t params = 0;
  int bytes_per_param = 0;
  double seconds_per_step = 0.0;
  double gbps = 0.0;  // 1e9 bytes/s, read and written
  int threads = 0;
  std::string binding;
};
MembwFigure measure_membw(const StreamOptions& options);

}  // namespace strata::tools::bench
