#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <latch>
#include <memory>
#include <string>

#include "gpu/device.h"
#include "gpu/device_query.h"
#include "gpu/open_device.h"

namespace strata::gpu::testing {

// Why the CUDA device cannot be opened on this machine ("no GPU: ...", "built without CUDA
// ..."), or "" when it can. Asked once per process.
inline const std::string& cuda_unavailable_reason() {
  static const std::string reason = [] {
    GpuInventory inventory = query_gpus();
    if (!inventory.cuda_built) return inventory.no_gpu_reason;
    if (inventory.gpus.empty()) return "no GPU: " + inventory.no_gpu_reason;
    if (!inventory.probe_kernel_ran) {
      return "no usable GPU: a test kernel did not run on " + inventory.gpus.front().name;
    }
    return std::string();
  }();
  return reason;
}

// The device suites run against the gpu::Device interface only, once per backend parameter:
// "host" is the host backend; "cuda" is the CUDA device as open_device() opens it, and skips
// with one line saying why where there is none (no GPU, or a build without CUDA). Tests touch
// device memory only through copies and fills, and launched tasks touch only host memory, so the
// same tests hold on CUDA. On CUDA the host tasks of all streams may run one at a time on the
// driver's thread, so no test lets one stream's task wait for another stream's task.
class DeviceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda" && !cuda_unavailable_reason().empty()) {
      GTEST_SKIP() << cuda_unavailable_reason();
    }
  }

  static std::unique_ptr<Device> open(DeviceOptions options = {}) {
    if (GetParam() == "host") return create_host_device(options);
    std::unique_ptr<Device> device = open_device(options);
    EXPECT_EQ(device->kind(), DeviceKind::cuda);
    return device;
  }
};

inline std::string backend_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

#define STRATA_INSTANTIATE_DEVICE_TESTS(suite)                                 \
  INSTANTIATE_TEST_SUITE_P(Backends, suite, ::testing::Values("host", "cuda"), \
                           ::strata::gpu::testing::backend_name)

// A door that stream tasks wait at until the test opens it: how the tests hold a stream busy
// without sleeping. Declare it after the device: if a failed assertion leaves the test early, the
// gate opens as it is destroyed, so the device's streams can drain instead of hanging. The tasks
// share the latch, so it outlives the last waiter. Queue only a few operations behind a closed
// gate before opening it from the same thread: a stream's queue is bounded (CUDA's too), and a
// thread blocked enqueueing into a full queue never gets to open the gate.
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
