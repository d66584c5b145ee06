// The host backend's ops: each one enqueues the matching gpu/host/kernels function on the
// stream, so it runs on the stream's worker thread in stream order, as a kernel would on a GPU.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>

#include "base/assert.h"
#include "cpu_adam/half.h"
#include "cpu_adam/optimizer.h"
#include "gpu/detail/elementwise.h"
#include "gpu/host/fp32_views.h"
#include "gpu/host/host_ops.h"
#include "gpu/host/kernels/cast.h"
#include "gpu/host/kernels/cross_entropy.h"
#include "gpu/host/kernels/embedding.h"
#include "gpu/host/kernels/flash_attention.h"
#include "gpu/host/kernels/gelu.h"
#include "gpu/host/kernels/kv_cache.h"
#include "gpu/host/kernels/layer_norm.h"
#include "gpu/host/kernels/matmul.h"
#include "gpu/host/kernels/qkv_pack.h"
#include "gpu/host/kernels/residual.h"
#include "gpu/host/kernels/rms_norm.h"
#include "gpu/host/kernels/rope.h"
#include "gpu/host/kernels/swiglu.h"
#include "gpu/ops.h"

namespace strata::gpu {
namespace {

namespace k = host::kernels;
using i64 = std::int64_t;

// Enqueues an op's body on `s`: the host backend's kernel launch.
template <class Body>
void kernel(Stream& s, Body&& body) {
  s.launch(HostTask::kernel(std::forward<Body>(body)));
}

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

// The elements RoPE's strided rows span: `x` may point into the middle of a fused QKV row, so
// the extent stops at the last row's last head rather than at a whole last row.
i64 rope_extent(i64 rows, i64 heads, i64 head_dim, i64 row_stride) {
  return rows == 0 ? 0 : (rows - 1) * row_stride + heads * head_dim;
}

// The rows of a position table the embedding reads: seq_len, or past the furthest start.
i64 positions_read(const std::int32_t* start, i64 batch, i64 seq_len) {
  i64 rows = seq_len;
  for (i64 b = 0; start != nullptr && b < batch; ++b)
    rows = std::max<i64>(rows, start[b] + seq_len);
  return rows;
}

using In = host::Fp32Input;
using Out = host::Fp32Output;
constexpr Out::Start fresh = Out::Start::uninitialized;
constexpr Out::Start current = Out::Start::current_values;

// Each op widens its 16-bit Tensors, runs the fp32 kernel and rounds what it wrote
// (gpu/host/fp32_views.h); on fp32 Tensors it is the kernel alone.
class HostOps final : public Ops {
 public:
  void embedding_forward(Stream& s, Tensor out, const std::int32_t* tokens, ConstTensor wte,
                         ConstTensor wpe, const std::int32_t* start, i64 b, i64 t, i64 c,
                         i64 v) override {
    host::common_type({out, wte, wpe});
    kernel(s, [=] {
      In table(wte, v * c), positions(wpe, positions_read(start, b, t) * c);
      Out y(out, b * t * c, fresh);
      k::embedding_forward<float>(y.get(), tokens, table.get(), positions.get(), b, t, c, v, start);
      y.store();
    });
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, ConstTensor dout,
                          const std::int32_t* tokens, i64 b, i64 t, i64 c, i64 v) override {
    kernel(s, [=] {
      In dy(dout, b * t * c);
      k::embedding_backward<float>(dwte, dwpe, dy.get(), tokens, b, t, c, v);
    });
  }
  void layer_norm_forward(Stream& s, Tensor out, float* mean, float* rstd, ConstTensor inp,
                          ConstTensor weight, ConstTensor bias, i64 rows, i64 c) override {
    host::common_type({out, inp, weight, bias});
    kernel(s, [=] {
      In x(inp, rows * c), w(weight, c), bb(bias, c);
      Out y(out, rows * c, fresh);
      k::layer_norm_forward<float>(y.get(), mean, rstd, x.get(), w.get(), bb.get(), rows, c);
      y.store();
    });
  }
  void layer_norm_backward(Stream& s, Tensor dinp, float* dweight, float* dbias, ConstTensor dout,
                           ConstTensor inp, ConstTensor weight, const float* mean,
                           const float* rstd, i64 rows, i64 c) override {
    host::common_type({dinp, dout, inp, weight});
    kernel(s, [=] {
      In dy(dout, rows * c), x(inp, rows * c), w(weight, c);
      Out dx(dinp, rows * c, current);
      k::layer_norm_backward<float>(dx.get(), dweight, dbias, dy.get(), x.get(), w.get(), mean,
                                    rstd, rows, c);
      dx.store();
    });
  }
  void residual_layer_norm_forward(Stream& s, Tensor residual, Tensor out, float* mean, float* rstd,
                                   ConstTensor a, ConstTensor b, ConstTensor weight,
                                   ConstTensor bias, i64 rows, i64 c) override {
    host::common_type({residual, out, a, b, weight, bias});
    kernel(s, [=] {
      const i64 n = rows * c;
      In x(a, n), y(b, n), w(weight, c), bb(bias, c);
      Out sum(residual, n, fresh);
      k::residual_forward<float>(sum.get(), x.get(), y.get(), n);
      sum.store();
      In rounded(residual, n);  // the sum as the norm on CUDA reads it: rounded once
      Out z(out, n, fresh);
      k::layer_norm_forward<float>(z.get(), mean, rstd, rounded.get(), w.get(), bb.get(), rows, c);
      z.store();
    });
  }
  void matmul_forward(Stream& s, Tensor out, ConstTensor inp, ConstTensor weight, ConstTensor bias,
                      i64 rows, i64 in, i64 out_channels) override {
    host::common_type({out, inp, weight, bias});
    const bool alone = rows_alone_;
    kernel(s, [=] {
      In x(inp, rows * in), w(weight, out_channels * in), bb(bias, out_channels);
      Out y(out, rows * out_channels, fresh);
      k::matmul_forward<float>(y.get(), x.get(), w.get(), bb.get(), rows, in, out_channels, alone);
      y.store();
    });
  }
  void matmul_gelu_forward(Stream& s, Tensor out, Tensor pre, ConstTensor inp, ConstTensor weight,
                           ConstTensor bias, i64 rows, i64 in, i64 out_channels) override {
    host::common_type({out, pre, inp, weight, bias});
    const bool alone = rows_alone_;
    kernel(s, [=] {
      const i64 n = rows * out_channels;
      In x(inp, rows * in), w(weight, out_channels * in), bb(bias, out_channels);
      Out y(out, n, fresh), p(pre, n, fresh);
      k::matmul_forward<float>(p.get(), x.get(), w.get(), bb.get(), rows, in, out_channels, alone);
      // The GELU reads the fp32 sum before store() rounds it into `pre`, as cuBLASLt's epilogue
      // does.
      k::gelu_forward<float>(y.get(), p.get(), n);
      y.store();
      p.store();
    });
  }
  void matmul_backward(Stream& s, Tensor dinp, float* dweight, float* dbias, ConstTensor dout,
                       ConstTensor inp, ConstTensor weight, i64 rows, i64 in,
                       i64 out_channels) override {
    host::common_type({dinp, dout, inp, weight});
    kernel(s, [=] {
      In dy(dout, rows * out_channels), x(inp, rows * in), w(weight, out_channels * in);
      Out dx(dinp, rows * in, current);
      k::matmul_backward<float>(dx.get(), dweight, dbias, dy.get(), x.get(), w.get(), rows, in,
                                out_channels);
      dx.store();
    });
  }
  void attention_forward(Stream& s, Tensor out, float* lse, ConstTensor qkv, i64 b, i64 t,
                         i64 heads, i64 kv_heads, i64 head_dim) override {
    host::common_type({out, qkv});
    const bool alone = rows_alone_;
    kernel(s, [=] {
      const i64 rows = b * t;
      In x(qkv, rows * (heads + 2 * kv_heads) * head_dim);
      Out y(out, rows * heads * head_dim, fresh);
      k::flash_attention_forward<float>(y.get(), lse, x.get(), b, t, heads, kv_heads, head_dim,
                                        alone);
      y.store();
    });
  }
  void attention_backward(Stream& s, Tensor dqkv, ConstTensor dout, ConstTensor qkv,
                          ConstTensor out, const float* lse, i64 b, i64 t, i64 heads, i64 kv_heads,
                          i64 head_dim) override {
    host::common_type({dqkv, dout, qkv, out});
    kernel(s, [=] {
      const i64 rows = b * t;
      const i64 fused = rows * (heads + 2 * kv_heads) * head_dim;
      In dy(dout, rows * heads * head_dim), x(qkv, fused), y(out, rows * heads * head_dim);
      Out dx(dqkv, fused, current);
      k::flash_attention_backward<float>(dx.get(), dy.get(), x.get(), y.get(), lse, b, t, heads,
                                         kv_heads, head_dim);
      dx.store();
    });
  }
  void kv_cache_write(Stream& s, Tensor k_cache, Tensor v_cache, ConstTensor qkv,
                      const std::int32_t* start, i64 b, i64 tokens, i64 heads, i64 kv_heads,
                      i64 head_dim, i64 max_seq) override {
    host::common_type({k_cache, v_cache, qkv});
    kernel(s, [=] {
      k::kv_cache_write(static_cast<std::byte*>(k_cache.data),
                        static_cast<std::byte*>(v_cache.data),
                        static_cast<const std::byte*>(qkv.data), start, b, tokens, heads, kv_heads,
                        head_dim, max_seq, size_bytes(qkv.type));
    });
  }
  // The scratch is CUDA's: the host folds each head's keys in one task.
  void decode_attention(Stream& s, Tensor out, ConstTensor qkv, ConstTensor k_cache,
                        ConstTensor v_cache, const std::int32_t* length, float* /*scratch*/, i64 b,
                        i64 heads, i64 kv_heads, i64 head_dim, i64 max_seq) override {
    host::common_type({out, qkv, k_cache, v_cache});
    kernel(s, [=] {
      const i64 cache = b * kv_heads * max_seq * head_dim;
      In x(qkv, b * (heads + 2 * kv_heads) * head_dim), kc(k_cache, cache), vc(v_cache, cache);
      Out y(out, b * heads * head_dim, fresh);
      k::decode_attention<float>(y.get(), x.get(), kc.get(), vc.get(), length, b, heads, kv_heads,
                                 head_dim, max_seq);
      y.store();
    });
  }
  void gelu_forward(Stream& s, Tensor out, ConstTensor inp, i64 n) override {
    host::common_type({out, inp});
    kernel(s, [=] {
      In x(inp, n);
      Out y(out, n, fresh);
      k::gelu_forward<float>(y.get(), x.get(), n);
      y.store();
    });
  }
  void gelu_backward(Stream& s, Tensor dinp, ConstTensor inp, ConstTensor dout, i64 n) override {
    host::common_type({dinp, inp, dout});
    kernel(s, [=] {
      In x(inp, n), dy(dout, n);
      Out dx(dinp, n, current);
      k::gelu_backward<float>(dx.get(), x.get(), dy.get(), n);
      dx.store();
    });
  }
  void residual_forward(Stream& s, Tensor out, ConstTensor a, ConstTensor b, i64 n) override {
    host::common_type({out, a, b});
    kernel(s, [=] {
      In x(a, n), y(b, n);
      Out sum(out, n, fresh);
      k::residual_forward<float>(sum.get(), x.get(), y.get(), n);
      sum.store();
    });
  }
  void residual_backward(Stream& s, Tensor da, Tensor db, ConstTensor dout, i64 n) override {
    host::common_type({da, db, dout});
    kernel(s, [=] {
      In dy(dout, n);
      Out dx(da, n, current), dz(db, n, current);
      k::residual_backward<float>(dx.get(), dz.get(), dy.get(), n);
      dx.store();
      dz.store();
    });
  }
  void cross_entropy_forward(Stream& s, float* losses, float* lse, float* loss_mean,
                             ConstTensor logits, const std::int32_t* targets, i64 rows, i64 v,
                             i64 vp) override {
    kernel(s, [=] {
      In z(logits, rows * vp);
      k::cross_entropy_forward<float>(losses, lse, loss_mean, z.get(), targets, rows, v, vp);
    });
  }
  void cross_entropy_backward(Stream& s, Tensor dlogits, ConstTensor logits, const float* lse,
                              const std::int32_t* targets, const float* dlosses, i64 rows, i64 v,
                              i64 vp) override {
    host::common_type({dlogits, logits});
    kernel(s, [=] {
      In z(logits, rows * vp);
      Out dz(dlogits, rows * vp, fresh);
      k::cross_entropy_backward<float>(dz.get(), z.get(), lse, targets, dlosses, rows, v, vp);
      dz.store();
    });
  }
  void cross_entropy_fused(Stream& s, Tensor logits, float* losses, float* lse, float* loss_mean,
                           const std::int32_t* targets, const float* dlosses, i64 rows, i64 v,
                           i64 vp) override {
    kernel(s, [=] {
      // The backward reads each logit before it writes the same element: in place is safe.
      Out z(logits, rows * vp, current);
      k::cross_entropy_forward<float>(losses, lse, loss_mean, z.get(), targets, rows, v, vp);
      k::cross_entropy_backward<float>(z.get(), z.get(), lse, targets, dlosses, rows, v, vp);
      z.store();
    });
  }
  void rms_norm_forward(Stream& s, Tensor out, float* rstd, ConstTensor inp, ConstTensor weight,
                        double eps, i64 rows, i64 c) override {
    host::common_type({out, inp, weight});
    kernel(s, [=] {
      In x(inp, rows * c), w(weight, c);
      Out y(out, rows * c, fresh);
      k::rms_norm_forward<float>(y.get(), rstd, x.get(), w.get(), eps, rows, c);
      y.store();
    });
  }
  void residual_rms_norm_forward(Stream& s, Tensor residual, Tensor out, float* rstd, ConstTensor a,
                                 ConstTensor b, ConstTensor weight, double eps, i64 rows,
                                 i64 c) override {
    host::common_type({residual, out, a, b, weight});
    kernel(s, [=] {
      const i64 n = rows * c;
      In x(a, n), y(b, n), w(weight, c);
      Out sum(residual, n, fresh);
      k::residual_forward<float>(sum.get(), x.get(), y.get(), n);
      sum.store();
      In rounded(residual, n);
      Out z(out, n, fresh);
      k::rms_norm_forward<float>(z.get(), rstd, rounded.get(), w.get(), eps, rows, c);
      z.store();
    });
  }
  void rms_norm_backward(Stream& s, Tensor dinp, float* dweight, ConstTensor dout, ConstTensor inp,
                         ConstTensor weight, const float* rstd, i64 rows, i64 c) override {
    host::common_type({dinp, dout, inp, weight});
    kernel(s, [=] {
      In dy(dout, rows * c), x(inp, rows * c), w(weight, c);
      Out dx(dinp, rows * c, current);
      k::rms_norm_backward<float>(dx.get(), dweight, dy.get(), x.get(), w.get(), rstd, rows, c);
      dx.store();
    });
  }
  // RoPE rotates in place: the whole strided buffer is widened, rotated and rounded back, which
  // leaves the elements it does not rotate as they were (a 16-bit value survives the round trip).
  void rope_forward(Stream& s, Tensor x, const float* inv_freq, const std::int32_t* start, i64 b,
                    i64 t, i64 heads, i64 head_dim, i64 row_stride) override {
    kernel(s, [=] {
      Out y(x, rope_extent(b * t, heads, head_dim, row_stride), current);
      k::rope_forward<float>(y.get(), inv_freq, b, t, heads, head_dim, row_stride, start);
      y.store();
    });
  }
  void rope_backward(Stream& s, Tensor dx, const float* inv_freq, i64 b, i64 t, i64 heads,
                     i64 head_dim, i64 row_stride) override {
    kernel(s, [=] {
      Out dy(dx, rope_extent(b * t, heads, head_dim, row_stride), current);
      k::rope_backward<float>(dy.get(), inv_freq, b, t, heads, head_dim, row_stride);
      dy.store();
    });
  }
  void swiglu_forward(Stream& s, Tensor out, ConstTensor gate, ConstTensor up, i64 n) override {
    host::common_type({out, gate, up});
    kernel(s, [=] {
      In g(gate, n), u(up, n);
      Out y(out, n, fresh);
      k::swiglu_forward<float>(y.get(), g.get(), u.get(), n);
      y.store();
    });
  }
  void swiglu_backward(Stream& s, Tensor dgate, Tensor dup, ConstTensor dout, ConstTensor gate,
                       ConstTensor up, i64 n) override {
    host::common_type({dgate, dup, dout, gate, up});
    kernel(s, [=] {
      In dy(dout, n), g(gate, n), u(up, n);
      Out dg(dgate, n, current), du(dup, n, current);
      k::swiglu_backward<float>(dg.get(), du.get(), dy.get(), g.get(), u.get(), n);
      dg.store();
      du.store();
    });
  }
  void qkv_pack_forward(Stream& s, Tensor qkv, ConstTensor q, ConstTensor kk, ConstTensor v,
                        i64 rows, i64 heads, i64 kv_heads, i64 head_dim) override {
    host::common_type({qkv, q, kk, v});
    kernel(s, [=] {
      const i64 kv = rows * kv_heads * head_dim;
      In xq(q, rows * heads * head_dim), xk(kk, kv), xv(v, kv);
      Out y(qkv, rows * (heads + 2 * kv_heads) * head_dim, fresh);
      k::qkv_pack_forward<float>(y.get(), xq.get(), xk.get(), xv.get(), rows, heads, kv_heads,
                                 head_dim);
      y.store();
    });
  }
  void qkv_pack_backward(Stream& s, Tensor dq, Tensor dk, Tensor dv, ConstTensor dqkv, i64 rows,
                         i64 heads, i64 kv_heads, i64 head_dim) override {
    host::common_type({dq, dk, dv, dqkv});
    kernel(s, [=] {
      const i64 kv = rows * kv_heads * head_dim;
      In dy(dqkv, rows * (heads + 2 * kv_heads) * head_dim);
      Out gq(dq, rows * heads * head_dim, current), gk(dk, kv, current), gv(dv, kv, current);
      k::qkv_pack_backward<float>(gq.get(), gk.get(), gv.get(), dy.get(), rows, heads, kv_heads,
                                  head_dim);
      gq.store();
      gk.store();
      gv.store();
    });
  }
  void cast_to_float(Stream& s, float* target, const void* source, DataType type, i64 n) override {
    auto* half = static_cast<const std::uint16_t*>(source);
    switch (type) {
      case DataType::float32:
        s.copy(target, source, n * 4, CopyKind::device_to_device);
        return;
      case DataType::bfloat16:
        kernel(s, [=] { k::cast_bf16_to_fp32(target, half, n); });
        return;
      case DataType::float16:
        kernel(s, [=] { k::cast_fp16_to_fp32(target, half, n); });
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
        kernel(s, [=] { k::cast_fp32_to_bf16(half, source, n); });
        return;
      case DataType::float16:
        kernel(s, [=] { k::cast_fp32_to_fp16(half, source, n); });
        return;
      default:
        STRATA_ASSERT(false && "cast_from_float takes floating-point types only");
    }
  }
  void fill(Stream& s, float* target, float value, i64 n) override {
    kernel(s, [=] {
      for (i64 i = 0; i < n; ++i)
        target[i] = value;
    });
  }
  void adam_step(Stream& s, const cpu_adam::AdamConfig& config, i64 step, float grad_scale,
                 const OptimizerArrays& a, i64 n) override {
    kernel(s, [config, run = HostOptimizerStep{step, grad_scale, a, n}] { run(config); });
  }
  void adagrad_step(Stream& s, const cpu_adam::AdagradConfig& config, i64 step, float grad_scale,
                    const OptimizerArrays& a, i64 n) override {
    kernel(s, [config, run = HostOptimizerStep{step, grad_scale, a, n}] { run(config); });
  }
  void lion_step(Stream& s, const cpu_adam::LionConfig& config, i64 step, float grad_scale,
                 const OptimizerArrays& a, i64 n) override {
    kernel(s, [config, run = HostOptimizerStep{step, grad_scale, a, n}] { run(config); });
  }
  void sum_squares(Stream& s, double* sum_squares, const float* values, i64 n) override {
    kernel(s, [sum_squares, values, n] {
      // The scan's sum is inf or NaN exactly when its flag is set: squares of finite floats
      // cannot overflow a double.
      *sum_squares =
          cpu_adam::scan_gradients<float>({values, static_cast<std::size_t>(n)}).sum_squares;
    });
  }
  void accumulate(Stream& s, float* target, const float* source, float scale, i64 n) override {
    kernel(s, [=] {
      for (i64 i = 0; i < n; ++i)
        target[i] = detail::scaled_sum(target[i], source[i], scale);
    });
  }
  void set_rows_alone(bool alone) override { rows_alone_ = alone; }

 private:
  bool rows_alone_ = false;  // read as each op is enqueued: an op keeps the mode it was asked in
};

}  // namespace

std::unique_ptr<Ops> host::create_host_ops() {
  return std::make_unique<HostOps>();
}

}  // namespace strata::gpu
