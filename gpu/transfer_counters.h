#pragma once

#include <atomic>
#include <cstdint>

#include "gpu/device.h"
#include "gpu/stream.h"

namespace strata::gpu {

// Bytes moved by copies, by kind, shared by all streams of one device (each backend says when a
// copy counts: the host backend once it has run, the CUDA backend when it is enqueued).
struct SharedTransferCounters {
  std::atomic<std::int64_t> bytes_h2d{0};
  std::atomic<std::int64_t> bytes_d2h{0};
  std::atomic<std::int64_t> bytes_d2d{0};
  std::atomic<std::int64_t> bytes_h2h{0};

  void add(CopyKind kind, std::int64_t bytes) noexcept;
  TransferCounters snapshot() const noexcept;
};

}  // namespace strata::gpu
