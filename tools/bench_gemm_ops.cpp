#include "tools/bench_gemm_ops.h"

#include <algorithm>
#include <random>
#include <string>

#include "base/assert.h"

namespace strata::tools {
namespace {

constexpr std::int64_t kRandomBlockElements = std::int64_t{1} << 20;

}  // namespace

struct DeviceGemmTimer::LayerTensors {
  gpu::DeviceBuffer inp, weight, bias, out, pre, dout, dinp, dweight, dbias;
};

DeviceGemmTimer::DeviceGemmTimer(gpu::Device& device, gpu::Ops& ops, gpu::DataType type,
                                 int repeats)
    : device_(device), ops_(ops), type_(type), repeats_(repeats) {
  STRATA_ASSERT(gpu::is_compute_type(type));
  STRATA_ASSERT(repeats > 0);
  std::mt19937 generator(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> block(static_cast<std::size_t>(kRandomBlockElements));
  for (float& value : block)
    value = uniform(generator);
  random_block_ = device_.allocate(kRandomBlockElements * 4, "bench gemm random values");
  gpu::Stream& stream = device_.compute_stream();
  stream.copy(random_block_.data(), block.data(), random_block_.bytes(),
              gpu::CopyKind::host_to_device);
  stream.synchronize();  // before `block` goes
  for (int r = 0; r < repeats; ++r) {
    starts_.push_back(device_.create_event());
    ends_.push_back(device_.create_event());
  }
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
  fill_random({t.inp.data(), type_}, rows * in);
  fill_random({t.weight.data(), type_}, out * in);
  fill_random({t.dout.data(), type_}, rows * out);
  if (layer.bias) fill_random({t.bias.data(), type_}, out);
  // The gradients accumulate from zero, as in a step's first micro-batch.
  gpu::Stream& stream = device_.compute_stream();
  for (const gpu::DeviceBuffer* gradient : {&t.dinp, &t.dweight, &t.dbias}) {
    if (!gradient->empty()) stream.fill_zero(gradient->data(), gradient->bytes());
  }
  stream.synchronize();
  return t;
}

void DeviceGemmTimer::fill_random(gpu::Tensor target, std::int64_t elements) {
  gpu::Stream& stream = device_.compute_stream();
  const std::int64_t block_elements = random_block_.bytes() / 4;
  for (std::int64_t done = 0; done < elements; done += block_elements) {
    const std::int64_t count = std::min(block_elements, elements - done);
    const gpu::Tensor part = target.at(done);
    if (target.type == gpu::DataType::float32) {
      stream.copy(part.data, random_block_.data(), count * 4, gpu::CopyKind::device_to_device);
    } else {
      ops_.cast_from_float(stream, part.data, target.type, random_block_.as<float>(), count);
    }
  }
}

// Enqueues one untimed call, then `repeats_` calls each between its two events, all back to back
// so that the device never waits for the host between them; the median of their times.
template <class EnqueueCall>
double DeviceGemmTimer::median_seconds(const EnqueueCall& enqueue_call) {
  gpu::Stream& stream = device_.compute_stream();
  enqueue_call(stream);
  for (int r = 0; r < repeats_; ++r) {
    stream.record(*starts_[static_cast<std::size_t>(r)]);
    enqueue_call(stream);
    stream.record(*ends_[static_cast<std::size_t>(r)]);
  }
  stream.synchronize();
  std::vector<double> seconds;
  for (int r = 0; r < repeats_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    seconds.push_back(ends_[i]->elapsed_ms(*starts_[i]) / 1e3);
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

OpTimes DeviceGemmTimer::time(const GemmLayer& layer) {
  const LayerTensors t = allocate(layer);
  const std::int64_t rows = layer.rows, in = layer.in, out = layer.out;
  const gpu::Tensor inp{t.inp.data(), type_}, weight{t.weight.data(), type_};
  const gpu::Tensor bias = layer.bias ? gpu::Tensor{t.bias.data(), type_} : gpu::Tensor{};
  const gpu::Tensor result{t.out.data(), type_}, dout{t.dout.data(), type_};
  const gpu::Tensor dinp{t.dinp.data(), type_};
  OpTimes times;
  times.forward_s = median_seconds([&](gpu::Stream& stream) {
    ops_.matmul_forward(stream, result, inp, weight, bias, rows, in, out);
  });
  if (layer.gelu) {
    const gpu::Tensor pre{t.pre.data(), type_};
    times.gelu_forward_s = median_seconds([&](gpu::Stream& stream) {
      ops_.matmul_gelu_forward(stream, result, pre, inp, weight, bias, rows, in, out);
    });
  }
  times.backward_s = median_seconds([&](gpu::Stream& stream) {
    ops_.matmul_backward(stream, dinp, t.dweight.as<float>(), t.dbias.as<float>(), dout, inp,
                         weight, rows, in, out);
  });
  return times;
}

}  // namespace strata::tools
