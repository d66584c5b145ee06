#include "gpu/transfer_counters.h"

namespace strata::gpu {

void SharedTransferCounters::add(CopyKind kind, std::int64_t bytes) noexcept {
  switch (kind) {
    case CopyKind::host_to_device:
      bytes_h2d.fetch_add(bytes, std::memory_order_relaxed);
      return;
    case CopyKind::device_to_host:
      bytes_d2h.fetch_add(bytes, std::memory_order_relaxed);
      return;
    case CopyKind::device_to_device:
      bytes_d2d.fetch_add(bytes, std::memory_order_relaxed);
      return;
    case CopyKind::host_to_host:
      bytes_h2h.fetch_add(bytes, std::memory_order_relaxed);
      return;
  }
}

TransferCounters SharedTransferCounters::snapshot() const noexcept {
  return TransferCounters{
      bytes_h2d.load(std::memory_order_relaxed), bytes_d2h.load(std::memory_order_relaxed),
      bytes_d2d.load(std::memory_order_relaxed), bytes_h2h.load(std::memory_order_relaxed)};
}

}  // namespace strata::gpu
