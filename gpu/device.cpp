#include "gpu/device.h"

#include "gpu/stream.h"

namespace strata::gpu {

std::string_view to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::host:
      return "host";
    case DeviceKind::cuda:
      return "cuda";
  }
  return "unknown";
}

std::string_view to_string(CopyKind kind) {
  switch (kind) {
    case CopyKind::host_to_device:
      return "host_to_device";
    case CopyKind::device_to_host:
      return "device_to_host";
    case CopyKind::device_to_device:
      return "device_to_device";
    case CopyKind::host_to_host:
      return "host_to_host";
  }
  return "unknown";
}

}  // namespace strata::gpu
