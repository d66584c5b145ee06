#pragma once

// A layer's products through the device's own ops (gpu::Ops::matmul_forward, matmul_gelu_forward
// and matmul_backward), as the engine runs them: on the device's compute stream, on device memory,
// in the compute type asked for. Each call is timed between two events recorded around it on the
// stream; the calls are enqueued back to back, after one untimed call (cuBLASLt's choice of
// algorithm, the host backend's scratch), and the median counts.

#include <memory>
#include <vector>

#include "gpu/device.h"
#include "gpu/ops.h"
#include "tools/bench_gemm_shapes.h"

namespace strata::tools {

struct OpTimes {
  double forward_s = 0;       // matmul_forward
  double gelu_forward_s = 0;  // matmul_gelu_forward, for a layer with `gelu`; else 0
  double backward_s = 0;      // matmul_backward: dinp, dweight and dbias
};

class DeviceGemmTimer {
 public:
  // `device` and `ops` (of that device) must outlive the timer; `type` is float32, bfloat16 or
  // float16 (asserted), `repeats` the timed calls per figure.
  DeviceGemmTimer(gpu::Device& device, gpu::Ops& ops, gpu::DataType type, int repeats);

  // Allocates the layer's tensors on the device, fills its inputs with random values in [-1, 1)
  // and times its ops; the tensors are freed before it returns.
  OpTimes time(const GemmLayer& layer);

 private:
  struct LayerTensors;
  LayerTensors allocate(const GemmLayer& layer);
  void fill_random(gpu::Tensor target, std::int64_t elements);
  template <class EnqueueCall>
  double median_seconds(const EnqueueCall& enqueue_call);

  gpu::Device& device_;
  gpu::Ops& ops_;
  gpu::DataType type_;
  int repeats_;
  // fp32 random values on the device, tiled over every input: a product's speed does not depend
  // on its values, and one block keeps the filling of a 400M-element tensor quick.
  gpu::DeviceBuffer random_block_;
  std::vector<std::unique_ptr<gpu::Event>> starts_;
  std::vector<std::unique_ptr<gpu::Event>> ends_;
};

}  // namespace strata::tools
