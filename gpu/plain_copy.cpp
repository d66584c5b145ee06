#include "gpu/plain_copy.h"

#include <cstring>

#include "base/assert.h"

#ifdef STRATA_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif

namespace strata::gpu {

void plain_copy(Device& device, void* target, const void* source, std::int64_t bytes,
                CopyKind kind) {
  STRATA_ASSERT(bytes >= 0);
  if (bytes == 0) return;
#ifdef STRATA_HAVE_CUDA
  if (device.kind() == DeviceKind::cuda) {
    cuda::plain_copy(device, target, source, bytes, kind);
    return;
  }
#endif
  STRATA_ASSERT(device.kind() == DeviceKind::host);
  (void)kind;  // on the host device every side is host memory
  std::memcpy(target, source, static_cast<std::size_t>(bytes));
}

}  // namespace strata::gpu
