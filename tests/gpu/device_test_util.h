#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <latch>
#include <memory>
#include <string>

#include "gpu/device.h"
#include "gpu/open_device.h"

namespace strata::gpu::testing {

// The device suites run against the gpu::Device interface only, once per backend parameter:
// "host" is the host backend; "default" is whatever open_device() picks on this machine (the
// host device here, the CUDA device on a GPU machine once gpu/cuda/ provides one). Tests touch
// device memory only through copies and fills, and launched tasks touch only host memory, so the
// same tests hold on CUDA.
class DeviceTest : public ::testing::TestWithParam<std::string> {
 protected:
  static std::unique_ptr<Device> open(DeviceOptions options = {}) {
    if (GetParam() == "host") return create_host_device(options);
    return open_device(options);
  }
};

inline std::string backend_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

#define STRATA_INSTANTIATE_DEVICE_TESTS(suite)                                    \
  INSTANTIATE_TEST_SUITE_P(Backends, suite, ::testing::Values("host", "default"), \
                           ::strata::gpu::testing::backend_name)

// A door that stream tasks wait at until the test opens it: how the tests hold a stream busy
// without sleeping. Declare it after the device: if a failed assertion leaves the test early, the
// gate opens as it is destroyed, so the device's streams can drain instead of hanging. The tasks
// share the latch, so it outlives the last waiter.
class Gate {
 public:
  Gate() = default;
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  ~Gate() { open(); }

  // A task for Stream::launch that blocks its stream until open() is called.
  auto waiter() const {
    return [latch = latch_] { latch->wait(); };
  }
  void open() {
    if (!opened_) latch_->count_down();
    opened_ = true;
  }

 private:
  std::shared_ptr<std::latch> latch_ = std::make_shared<std::latch>(1);
  bool opened_ = false;
};

}  // namespace strata::gpu::testing
