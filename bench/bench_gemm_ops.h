#pragma once

// A layer's products through the device's own ops (gpu::Ops::matmul_forward, matmul_gelu_forward
// and matmul_backward), as the engine runs them: on the device's compute stream, on device memory,
// in the compute type asked for, each figure the median call of bench/bench_op_timer.h.

#include "bench/bench_gemm_shapes.h"
#include "bench/bench_op_timer.h"
#include "gpu/device.h"
#include "gpu/ops.h"

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

  gpu::Device& device_;
  gpu::Ops& ops_;
  gpu::DataType type_;
  DeviceOpTimer timer_;
};

}  // namespace strata::tools
