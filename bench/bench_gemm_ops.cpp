#include "bench/bench_gemm_ops.h"

#include "base/assert.h"

namespace strata::tools {

struct DeviceGemmTimer::LayerTensors {
  gpu::DeviceBuffer inp, weight, bias, out, pre, dout, dinp, dweight, dbias;
};

DeviceGemmTimer::DeviceGemmTimer(gpu::Device& device, gpu::Ops& ops, gpu::DataType type,
                                 int repeats)
    : device_(device), ops_(ops), type_(type), timer_(device, ops, repeats) {
  STRATA_ASSERT(gpu::is_compute_type(type));
}

DeviceGemmTimer::LayerTensors DeviceGemmTimer::allocate(const GemmLayer& layer) {
  const std::int64_t element = gpu::size_bytes(type_);
  const std::int64_t rows = layer.rows, in = layer.in, out = layer.out;
  LayerTensors t;
  t.inp = device_.allocate(rows * in * element, "bench gemm input");
  t.weight = device_.allocate(out * in * element, "bench gemm weight");
  t.out = device_.allocate(rows * out * element, "bench gemm output");
  t.dout = device_.allocate(rows * out * element, "bench gemm output gradient");
  t.dinp = device_.allocate(rows * in * element, "bench gemm input gradient");
  t.dweight = device_.allocate(out * in * 4, "bench gemm weight gradient");
  if (layer.bias) {
    t.bias = device_.allocate(out * element, "bench gemm bias");
    t.dbias = device_.allocate(out * 4, "bench gemm bias gradient");
  }
  if (layer.gelu) t.pre = device_.allocate(rows * out * element, "bench gemm pre-GELU output");
  timer_.fill_random({t.inp.data(), type_}, rows * in);
  timer_.fill_random({t.weight.data(), type_}, out * in);
  timer_.fill_random({t.dout.data(), type_}, rows * out);
  if (layer.bias) timer_.fill_random({t.bias.data(), type_}, out);
  // The gradients accumulate from zero, as in a step's first micro-batch.
  gpu::Stream& stream = device_.compute_stream();
  for (const gpu::DeviceBuffer* gradient : {&t.dinp, &t.dweight, &t.dbias}) {
    if (!gradient->empty()) stream.fill_zero(gradient->data(), gradient->bytes());
  }
  stream.synchronize();
  return t;
}

OpTimes DeviceGemmTimer::time(const GemmLayer& layer) {
  const LayerTensors t = allocate(layer);
  const std::int64_t rows = layer.rows, in = layer.in, out = layer.out;
  const gpu::Tensor inp{t.inp.data(), type_}, weight{t.weight.data(), type_};
  const gpu::Tensor bias = layer.bias ? gpu::Tensor{t.bias.data(), type_} : gpu::Tensor{};
  const gpu::Tensor result{t.out.data(), type_}, dout{t.dout.data(), type_};
  const gpu::Tensor dinp{t.dinp.data(), type_};
  OpTimes times;
  times.forward_s = timer_.median_seconds([&](gpu::Stream& stream) {
    ops_.matmul_forward(stream, result, inp, weight, bias, rows, in, out);
  });
  if (layer.gelu) {
    const gpu::Tensor pre{t.pre.data(), type_};
    times.gelu_forward_s = timer_.median_seconds([&](gpu::Stream& stream) {
      ops_.matmul_gelu_forward(stream, result, pre, inp, weight, bias, rows, in, out);
    });
  }
  times.backward_s = timer_.median_seconds([&](gpu::Stream& stream) {
    ops_.matmul_backward(stream, dinp, t.dweight.as<float>(), t.dbias.as<float>(), dout, inp,
                         weight, rows, in, out);
  });
  return times;
}

}  // namespace strata::tools
