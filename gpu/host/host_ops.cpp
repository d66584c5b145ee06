// The host backend's ops: each one enqueues the matching gpu/host/kernels function on the
// stream, so it runs on the stream's worker thread in stream order, as a kernel would on a GPU.
#include <memory>
#include <span>

#include "base/assert.h"
#include "cpu_adam/half.h"
#include "cpu_adam/optimizer.h"
#include "gpu/detail/elementwise.h"
#include "gpu/host/kernels/attention.h"
#include "gpu/host/kernels/cast.h"
#include "gpu/host/kernels/cross_entropy.h"
#include "gpu/host/kernels/embedding.h"
#include "gpu/host/kernels/gelu.h"
#include "gpu/host/kernels/layer_norm.h"
#include "gpu/host/kernels/matmul.h"
#include "gpu/host/kernels/qkv_pack.h"
#include "gpu/host/kernels/residual.h"
#include "gpu/host/kernels/rms_norm.h"
#include "gpu/host/kernels/rope.h"
#include "gpu/host/kernels/swiglu.h"
#include "gpu/ops.h"

#ifdef STRATA_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif

namespace strata::gpu {
namespace {

namespace k = host::kernels;
using i64 = std::int64_t;

// Calls run(copy) with the parameter copy of `a` as the span cpu_adam takes (none, bf16, fp16).
template <class Run>
void with_copy(const OptimizerArrays& a, i64 n, const Run& run) {
  const auto count = static_cast<std::size_t>(n);
  switch (a.copy_type) {
    case DataType::float32:
      STRATA_ASSERT(a.param_copy == nullptr);
      run(std::span<cpu_adam::NoCopy>());
      return;
    case DataType::bfloat16:
      run(std::span<cpu_adam::bf16>(static_cast<cpu_adam::bf16*>(a.param_copy), count));
      return;
    case DataType::float16:
      run(std::span<cpu_adam::fp16>(static_cast<cpu_adam::fp16*>(a.param_copy), count));
      return;
    default:
      STRATA_ASSERT(false && "the parameter copy is float32 (none), bfloat16 or float16");
  }
}

// The optimizer steps on host "device" memory: cpu_adam itself, at the CPU's SIMD level.
struct HostOptimizerStep {
  i64 step;
  float grad_scale;
  OptimizerArrays a;
  i64 n;

  std::span<float> params() const { return {a.params, static_cast<std::size_t>(n)}; }
  std::span<const float> grads() const { return {a.grads, static_cast<std::size_t>(n)}; }
  std::span<float> exp_avg() const { return {a.exp_avg, static_cast<std::size_t>(n)}; }
  std::span<float> exp_avg_sq() const { return {a.exp_avg_sq, static_cast<std::size_t>(n)}; }

  void operator()(const cpu_adam::AdamConfig& config) const {
    with_copy(a, n, [&]<class H>(std::span<H> copy) {
      cpu_adam::step<float, H>(config, step, params(), grads(), exp_avg(), exp_avg_sq(), copy,
                               grad_scale);
    });
  }
  void operator()(const cpu_adam::AdagradConfig& config) const {
    with_copy(a, n, [&]<class H>(std::span<H> copy) {
      cpu_adam::step<float, H>(config, step, params(), grads(), exp_avg_sq(), copy, grad_scale);
    });
  }
  void operator()(const cpu_adam::LionConfig& config) const {
    with_copy(a, n, [&]<class H>(std::span<H> copy) {
      cpu_adam::step<float, H>(config, step, params(), grads(), exp_avg(), copy, grad_scale);
    });
  }
};

class HostOps final : public Ops {
 public:
  void embedding_forward(Stream& s, float* out, const std::int32_t* tokens, const float* wte,
                         const float* wpe, i64 b, i64 t, i64 c, i64 v) override {
    s.launch([=] { k::embedding_forward<float>(out, tokens, wte, wpe, b, t, c, v); });
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, const float* dout,
                          const std::int32_t* tokens, i64 b, i64 t, i64 c, i64 v) override {
    s.launch([=] { k::embedding_backward<float>(dwte, dwpe, dout, tokens, b, t, c, v); });
  }
  void layer_norm_forward(Stream& s, float* out, float* mean, float* rstd, const float* inp,
                          const float* weight, const float* bias, i64 rows, i64 c) override {
    s.launch([=] { k::layer_norm_forward<float>(out, mean, rstd, inp, weight, bias, rows, c); });
  }
  void layer_norm_backward(Stream& s, float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, const float* mean,
                           const float* rstd, i64 rows, i64 c) override {
    s.launch([=] {
      k::layer_norm_backward<float>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, c);
    });
  }
  void matmul_forward(Stream& s, float* out, const float* inp, const float* weight,
                      const float* bias, i64 rows, i64 in, i64 out_channels) override {
    s.launch([=] { k::matmul_forward<float>(out, inp, weight, bias, rows, in, out_channels); });
  }
  void matmul_backward(Stream& s, float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, i64 rows, i64 in,
                       i64 out_channels) override {
    s.launch([=] {
      k::matmul_backward<float>(dinp, dweight, dbias, dout, inp, weight, rows, in, out_channels);
    });
  }
  void attention_forward(Stream& s, float* out, float* att, const float* qkv, i64 b, i64 t, i64 c,
                         i64 heads) override {
    s.launch([=] { k::attention_forward<float>(out, att, qkv, b, t, c, heads); });
  }
  void attention_backward(Stream& s, float* dqkv, const float* dout, const float* qkv,
                          const float* att, i64 b, i64 t, i64 c, i64 heads) override {
    s.launch([=] { k::attention_backward<float>(dqkv, dout, qkv, att, b, t, c, heads); });
  }
  void gelu_forward(Stream& s, float* out, const float* inp, i64 n) override {
    s.launch([=] { k::gelu_forward<float>(out, inp, n); });
  }
  void gelu_backward(Stream& s, float* dinp, const float* inp, const float* dout, i64 n) override {
    s.launch([=] { k::gelu_backward<float>(dinp, inp, dout, n); });
  }
  void residual_forward(Stream& s, float* out, const float* a, const float* b, i64 n) override {
    s.launch([=] { k::residual_forward<float>(out, a, b, n); });
  }
  void residual_backward(Stream& s, float* da, float* db, const float* dout, i64 n) override {
    s.launch([=] { k::residual_backward<float>(da, db, dout, n); });
  }
  void cross_entropy_forward(Stream& s, float* losses, float* lse, float* loss_mean,
                             const float* logits, const std::int32_t* targets, i64 rows, i64 v,
                             i64 vp) override {
    s.launch([=] {
      k::cross_entropy_forward<float>(losses, lse, loss_mean, logits, targets, rows, v, vp);
    });
  }
  void cross_entropy_backward(Stream& s, float* dlogits, const float* logits, const float* lse,
                              const std::int32_t* targets, const float* dlosses, i64 rows, i64 v,
                              i64 vp) override {
    s.launch([=] {
      k::cross_entropy_backward<float>(dlogits, logits, lse, targets, dlosses, rows, v, vp);
    });
  }
  void rms_norm_forward(Stream& s, float* out, float* rstd, const float* inp, const float* weight,
                        double eps, i64 rows, i64 c) override {
    s.launch([=] { k::rms_norm_forward<float>(out, rstd, inp, weight, eps, rows, c); });
  }
  void rms_norm_backward(Stream& s, float* dinp, float* dweight, const float* dout,
                         const float* inp, const float* weight, const float* rstd, i64 rows,
                         i64 c) override {
    s.launch([=] { k::rms_norm_backward<float>(dinp, dweight, dout, inp, weight, rstd, rows, c); });
  }
  void rope_forward(Stream& s, float* x, const float* inv_freq, i64 b, i64 t, i64 heads,
                    i64 head_dim, i64 row_stride) override {
    s.launch([=] { k::rope_forward<float>(x, inv_freq, b, t, heads, head_dim, row_stride); });
  }
  void rope_backward(Stream& s, float* dx, const float* inv_freq, i64 b, i64 t, i64 heads,
                     i64 head_dim, i64 row_stride) override {
    s.launch([=] { k::rope_backward<float>(dx, inv_freq, b, t, heads, head_dim, row_stride); });
  }
  void swiglu_forward(Stream& s, float* out, const float* gate, const float* up, i64 n) override {
    s.launch([=] { k::swiglu_forward<float>(out, gate, up, n); });
  }
  void swiglu_backward(Stream& s, float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, i64 n) override {
    s.launch([=] { k::swiglu_backward<float>(dgate, dup, dout, gate, up, n); });
  }
  void qkv_pack_forward(Stream& s, float* qkv, const float* q, const float* kk, const float* v,
                        i64 rows, i64 heads, i64 kv_heads, i64 head_dim) override {
    s.launch([=] { k::qkv_pack_forward<float>(qkv, q, kk, v, rows, heads, kv_heads, head_dim); });
  }
  void qkv_pack_backward(Stream& s, float* dq, float* dk, float* dv, const float* dqkv, i64 rows,
                         i64 heads, i64 kv_heads, i64 head_dim) override {
    s.launch(
        [=] { k::qkv_pack_backward<float>(dq, dk, dv, dqkv, rows, heads, kv_heads, head_dim); });
  }
  void cast_to_float(Stream& s, float* target, const void* source, DataType type, i64 n) override {
    auto* half = static_cast<const std::uint16_t*>(source);
    switch (type) {
      case DataType::float32:
        s.copy(target, source, n * 4, CopyKind::device_to_device);
        return;
      case DataType::bfloat16:
        s.launch([=] { k::cast_bf16_to_fp32(target, half, n); });
        return;
      case DataType::float16:
        s.launch([=] { k::cast_fp16_to_fp32(target, half, n); });
        return;
      default:
        STRATA_ASSERT(false && "cast_to_float takes floating-point types only");
    }
  }
  void cast_from_float(Stream& s, void* target, DataType type, const float* source,
                       i64 n) override {
    auto* half = static_cast<std::uint16_t*>(target);
    switch (type) {
      case DataType::float32:
        s.copy(target, source, n * 4, CopyKind::device_to_device);
        return;
      case DataType::bfloat16:
        s.launch([=] { k::cast_fp32_to_bf16(half, source, n); });
        return;
      case DataType::float16:
        s.launch([=] { k::cast_fp32_to_fp16(half, source, n); });
        return;
      default:
        STRATA_ASSERT(false && "cast_from_float takes floating-point types only");
    }
  }
  void fill(Stream& s, float* target, float value, i64 n) override {
    s.launch([=] {
      for (i64 i = 0; i < n; ++i)
        target[i] = value;
    });
  }
  void adam_step(Stream& s, const cpu_adam::AdamConfig& config, i64 step, float grad_scale,
                 const OptimizerArrays& a, i64 n) override {
    s.launch([config, run = HostOptimizerStep{step, grad_scale, a, n}] { run(config); });
  }
  void adagrad_step(Stream& s, const cpu_adam::AdagradConfig& config, i64 step, float grad_scale,
                    const OptimizerArrays& a, i64 n) override {
    s.launch([config, run = HostOptimizerStep{step, grad_scale, a, n}] { run(config); });
  }
  void lion_step(Stream& s, const cpu_adam::LionConfig& config, i64 step, float grad_scale,
                 const OptimizerArrays& a, i64 n) override {
    s.launch([config, run = HostOptimizerStep{step, grad_scale, a, n}] { run(config); });
  }
  void sum_squares(Stream& s, double* sum_squares, const float* values, i64 n) override {
    s.launch([sum_squares, values, n] {
      // The scan's sum is inf or NaN exactly when its flag is set: squares of finite floats
      // cannot overflow a double.
      *sum_squares =
          cpu_adam::scan_gradients<float>({values, static_cast<std::size_t>(n)}).sum_squares;
    });
  }
  void accumulate(Stream& s, float* target, const float* source, float scale, i64 n) override {
    s.launch([=] {
      for (i64 i = 0; i < n; ++i)
        target[i] = detail::scaled_sum(target[i], source[i], scale);
    });
  }
};

}  // namespace

std::unique_ptr<Ops> create_ops(Device& device) {
#ifdef STRATA_HAVE_CUDA
  if (device.kind() == DeviceKind::cuda) return cuda::create_cuda_ops(device);
#endif
  STRATA_ASSERT(device.kind() == DeviceKind::host);
  return std::make_unique<HostOps>();
}

}  // namespace strata::gpu
