#include "bench/bench_copy.h"

#include <algorithm>
#include <chrono>

#include "gpu/plain_copy.h"

namespace strata::tools::bench {

CopyTimes copy_times(gpu::Device& device, gpu::Stream& stream, void* target, const void* source,
                     std::int64_t bytes, gpu::CopyKind kind, int steps) {
  auto start = device.create_event();
  auto end = device.create_event();
  stream.copy(target, source, bytes, kind);
  stream.synchronize();
  gpu::plain_copy(device, target, source, bytes, kind);
  CopyTimes times;
  for (int step = 0; step < steps; ++step) {
    stream.record(*start);
    stream.copy(target, source, bytes, kind);
    stream.record(*end);
    end->synchronize();
    times.engine_seconds = std::min(times.engine_seconds, end->elapsed_ms(*start) / 1e3);
    const auto begin = std::chrono::steady_clock::now();
    gpu::plain_copy(device, target, source, bytes, kind);
    times.plain_seconds =
        std::min(times.plain_seconds,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  }
  return times;
}

}  // namespace strata::tools::bench
