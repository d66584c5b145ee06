#include "gpu/device.h"

#include <algorithm>

#include "base/assert.h"
#include "base/log.h"
#include "gpu/stream.h"

namespace strata::gpu {

std::string_view to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::host:
      return "host";
    case DeviceKind::cuda:
      return "cuda";
    case DeviceKind::counting:
      return "counting";
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

void Stream::synchronize() {
  if (std::exception_ptr error = drain()) std::rethrow_exception(error);
}

void Device::synchronize() {
  std::exception_ptr first_error;
  auto drain = [&first_error](Stream& stream) {
    std::exception_ptr error = stream.drain();
    if (error && !first_error) first_error = std::move(error);
  };
  drain(compute_stream());
  drain(h2d_stream());
  drain(d2h_stream());
  {
    // Held while draining, so that no created stream is destroyed half-way; a task running on a
    // stream must therefore not create or destroy streams while the host synchronizes the device.
    std::lock_guard lock(created_streams_mutex_);
    for (Stream* stream : created_streams_)
      drain(*stream);
  }
  if (first_error) std::rethrow_exception(first_error);
}

void Device::add_created_stream(Stream& stream) {
  std::lock_guard lock(created_streams_mutex_);
  created_streams_.push_back(&stream);
}

void Device::remove_created_stream(Stream& stream) noexcept {
  std::lock_guard lock(created_streams_mutex_);
  auto found = std::find(created_streams_.begin(), created_streams_.end(), &stream);
  STRATA_ASSERT(found != created_streams_.end());
  created_streams_.erase(found);
}

void Device::expect_no_created_streams() noexcept {
  std::lock_guard lock(created_streams_mutex_);
  if (!created_streams_.empty()) {
    base::logger("gpu").critical("{} device destroyed while {} created streams are still live",
                                 to_string(kind()), created_streams_.size());
  }
  STRATA_ASSERT(created_streams_.empty());
}

}  // namespace strata::gpu
