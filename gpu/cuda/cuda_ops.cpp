// gpu::Ops for CUDA devices: each op picks the element type of its Tensors (element_dispatch.h)
// and enqueues the kernels of its family (gpu/cuda/kernels/) or the cuBLASLt products of
// cuda_matmul.h on the stream.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "base/assert.h"
#include "cpu_adam/detail/args.h"
#include "gpu/cuda/backend.h"
#include "gpu/cuda/cuda_device.h"
#include "gpu/cuda/cuda_matmul.h"
#if STRATA_HAVE_CUDNN
#include "gpu/cuda/cudnn_attention.h"
#endif
#include "gpu/cuda/element_dispatch.h"
#include "gpu/cuda/kernel_launch.h"
#include "gpu/cuda/kernels/attention.h"
#include "gpu/cuda/kernels/cast.h"
#include "gpu/cuda/kernels/cross_entropy.h"
#include "gpu/cuda/kernels/decode.h"
#include "gpu/cuda/kernels/elementwise.h"
#include "gpu/cuda/kernels/embedding.h"
#include "gpu/cuda/kernels/gelu.h"
#include "gpu/cuda/kernels/layer_norm.h"
#include "gpu/cuda/kernels/optimizer.h"
#include "gpu/cuda/kernels/qkv_pack.h"
#include "gpu/cuda/kernels/residual.h"
#include "gpu/cuda/kernels/rms_norm.h"
#include "gpu/cuda/kernels/rope.h"
#include "gpu/cuda/kernels/swiglu.h"
#include "gpu/cuda/stream_scratch.h"

namespace strata::gpu::cuda {
namespace {

using i64 = std::int64_t;

kernels::ParamCopy to_param_copy(DataType type) {
  switch (type) {
    case DataType::float32:
      return kernels::ParamCopy::none;
    case DataType::bfloat16:
      return kernels::ParamCopy::bf16;
    case DataType::float16:
      return kernels::ParamCopy::fp16;
    default:
      STRATA_ASSERT(false && "the parameter copy is float32 (none), bfloat16 or float16");
  }
  return kernels::ParamCopy::none;
}

kernels::OptimizerPointers to_pointers(const OptimizerArrays& a) {
  STRATA_ASSERT((a.copy_type == DataType::float32) == (a.param_copy == nullptr));
  return kernels::OptimizerPointers{a.params, a.grads, a.exp_avg, a.exp_avg_sq,
                                    static_cast<std::uint16_t*>(a.param_copy)};
}

class CudaOps final : public Ops {
 public:
  CudaOps(CudaDevice& device, OpsOptions options)
      : device_(device),
        matmul_(device, options),
        attention_scratch_(device, "attention scratch"),
        norm_partials_(device, "gradient norm partial sums") {
#if STRATA_HAVE_CUDNN
    if (options.cudnn_attention) cudnn_attention_ = std::make_unique<CudnnAttention>(device);
#endif
  }

  void embedding_forward(Stream& s, Tensor out, const std::int32_t* tokens, ConstTensor wte,
                         ConstTensor wpe, const std::int32_t* start, i64 b, i64 t, i64 c,
                         i64 v) override {
    run(common_type({out, wte, wpe}), "embedding_forward", [&](auto e) {
      return kernels::embedding_forward(on(s), as(e, out), tokens, as(e, wte), as(e, wpe), start, b,
                                        t, c, v);
    });
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, ConstTensor dout,
                          const std::int32_t* tokens, i64 b, i64 t, i64 c, i64 v) override {
    run(dout.type, "embedding_backward", [&](auto e) {
      return kernels::embedding_backward(on(s), dwte, dwpe, as(e, dout), tokens, b, t, c, v);
    });
  }

  void layer_norm_forward(Stream& s, Tensor out, float* mean, float* rstd, ConstTensor inp,
                          ConstTensor weight, ConstTensor bias, i64 rows, i64 c) override {
    run(common_type({out, inp, weight, bias}), "layer_norm_forward", [&](auto e) {
      return kernels::layer_norm_forward(on(s), as(e, out), mean, rstd, as(e, inp), as(e, weight),
                                         as(e, bias), rows, c);
    });
  }
  void residual_layer_norm_forward(Stream& s, Tensor residual, Tensor out, float* mean, float* rstd,
                                   ConstTensor a, ConstTensor b, ConstTensor weight,
                                   ConstTensor bias, i64 rows, i64 c) override {
    run(common_type({residual, out, a, b, weight, bias}), "residual_layer_norm_forward",
        [&](auto e) {
          return kernels::residual_layer_norm_forward(on(s), as(e, residual), as(e, out), mean,
                                                      rstd, as(e, a), as(e, b), as(e, weight),
                                                      as(e, bias), rows, c);
        });
  }
  void layer_norm_backward(Stream& s, Tensor dinp, float* dweight, float* dbias, ConstTensor dout,
                           ConstTensor inp, ConstTensor weight, const float* mean,
                           const float* rstd, i64 rows, i64 c) override {
    run(common_type({dinp, dout, inp, weight}), "layer_norm_backward", [&](auto e) {
      return kernels::layer_norm_backward(on(s), as(e, dinp), dweight, dbias, as(e, dout),
                                          as(e, inp), as(e, weight), mean, rstd, rows, c);
    });
  }

  void matmul_forward(Stream& s, Tensor out, ConstTensor inp, ConstTensor weight, ConstTensor bias,
                      i64 rows, i64 in, i64 out_channels) override {
    matmul_.forward(s, out, Tensor(), inp, weight, bias, rows, in, out_channels);
  }
  void matmul_gelu_forward(Stream& s, Tensor out, Tensor pre, ConstTensor inp, ConstTensor weight,
                           ConstTensor bias, i64 rows, i64 in, i64 out_channels) override {
    STRATA_ASSERT(static_cast<bool>(pre));
    matmul_.forward(s, out, pre, inp, weight, bias, rows, in, out_channels);
  }
  void matmul_backward(Stream& s, Tensor dinp, float* dweight, float* dbias, ConstTensor dout,
                       ConstTensor inp, ConstTensor weight, i64 rows, i64 in,
                       i64 out_channels) override {
    matmul_.backward(s, dinp, dweight, dbias, dout, inp, weight, rows, in, out_channels);
  }

  void attention_forward(Stream& s, Tensor out, float* lse, ConstTensor qkv, i64 b, i64 t,
                         i64 heads, i64 kv_heads, i64 head_dim) override {
    const kernels::AttentionShape shape = attention_shape(b, t, heads, kv_heads, head_dim);
#if STRATA_HAVE_CUDNN
    (void)common_type({out, qkv});  // asserts one type, as the kernels' launch below does
    if (cudnn_attention_ && cudnn_attention_->forward(s, out, lse, qkv, shape)) {
      ++forward_paths_.cudnn;
      return;
    }
#endif
    kernels::AttentionKernels ran{};
    run(common_type({out, qkv}), "attention_forward", [&](auto e) {
      return kernels::attention_forward(on(s), as(e, out), lse, as(e, qkv), shape, &ran);
    });
    count(forward_paths_, ran);
  }
  void attention_backward(Stream& s, Tensor dqkv, ConstTensor dout, ConstTensor qkv,
                          ConstTensor out, const float* lse, i64 b, i64 t, i64 heads, i64 kv_heads,
                          i64 head_dim) override {
    const kernels::AttentionShape shape = attention_shape(b, t, heads, kv_heads, head_dim);
#if STRATA_HAVE_CUDNN
    (void)common_type({dqkv, dout, qkv, out});
    if (cudnn_attention_ && cudnn_attention_->backward(s, dqkv, dout, qkv, out, lse, shape)) {
      ++backward_paths_.cudnn;
      return;
    }
#endif
    // The scratch first: growing it may synchronize the stream, which the kernel's op must not
    // span.
    auto* delta = static_cast<float*>(attention_scratch_.get(s, b * heads * t * i64{4}));
    kernels::AttentionKernels ran{};
    run(common_type({dqkv, dout, qkv, out}), "attention_backward", [&](auto e) {
      return kernels::attention_backward(on(s), as(e, dqkv), delta, as(e, dout), as(e, qkv),
                                         as(e, out), lse, shape, &ran);
    });
    count(backward_paths_, ran);
  }

  void gelu_forward(Stream& s, Tensor out, ConstTensor inp, i64 n) override {
    run(common_type({out, inp}), "gelu_forward",
        [&](auto e) { return kernels::gelu_forward(on(s), as(e, out), as(e, inp), n); });
  }
  void gelu_backward(Stream& s, Tensor dinp, ConstTensor inp, ConstTensor dout, i64 n) override {
    run(common_type({dinp, inp, dout}), "gelu_backward", [&](auto e) {
      return kernels::gelu_backward(on(s), as(e, dinp), as(e, inp), as(e, dout), n);
    });
  }

  void residual_forward(Stream& s, Tensor out, ConstTensor a, ConstTensor b, i64 n) override {
    run(common_type({out, a, b}), "residual_forward", [&](auto e) {
      return kernels::residual_forward(on(s), as(e, out), as(e, a), as(e, b), n);
    });
  }
  void residual_backward(Stream& s, Tensor da, Tensor db, ConstTensor dout, i64 n) override {
    run(common_type({da, db, dout}), "residual_backward", [&](auto e) {
      return kernels::residual_backward(on(s), as(e, da), as(e, db), as(e, dout), n);
    });
  }

  void cross_entropy_forward(Stream& s, float* losses, float* lse, float* loss_mean,
                             ConstTensor logits, const std::int32_t* targets, i64 rows, i64 v,
                             i64 vp) override {
    STRATA_ASSERT(v > 0 && v <= vp);
    run(logits.type, "cross_entropy_forward", [&](auto e) {
      return kernels::cross_entropy_forward(on(s), losses, lse, loss_mean, as(e, logits), targets,
                                            rows, v, vp);
    });
  }
  void cross_entropy_backward(Stream& s, Tensor dlogits, ConstTensor logits, const float* lse,
                              const std::int32_t* targets, const float* dlosses, i64 rows, i64 v,
                              i64 vp) override {
    STRATA_ASSERT(v > 0 && v <= vp);
    run(common_type({dlogits, logits}), "cross_entropy_backward", [&](auto e) {
      return kernels::cross_entropy_backward(on(s), as(e, dlogits), as(e, logits), lse, targets,
                                             dlosses, rows, v, vp);
    });
  }
  void cross_entropy_fused(Stream& s, Tensor logits, float* losses, float* lse, float* loss_mean,
                           const std::int32_t* targets, const float* dlosses, i64 rows, i64 v,
                           i64 vp) override {
    STRATA_ASSERT(v > 0 && v <= vp);
    run(logits.type, "cross_entropy_fused", [&](auto e) {
      return kernels::cross_entropy_fused(on(s), as(e, logits), losses, lse, loss_mean, targets,
                                          dlosses, rows, v, vp);
    });
  }

  void residual_rms_norm_forward(Stream& s, Tensor residual, Tensor out, float* rstd, ConstTensor a,
                                 ConstTensor b, ConstTensor weight, double eps, i64 rows,
                                 i64 c) override {
    run(common_type({residual, out, a, b, weight}), "residual_rms_norm_forward", [&](auto e) {
      return kernels::residual_rms_norm_forward(on(s), as(e, residual), as(e, out), rstd, as(e, a),
                                                as(e, b), as(e, weight), eps, rows, c);
    });
  }
  void rms_norm_forward(Stream& s, Tensor out, float* rstd, ConstTensor inp, ConstTensor weight,
                        double eps, i64 rows, i64 c) override {
    run(common_type({out, inp, weight}), "rms_norm_forward", [&](auto e) {
      return kernels::rms_norm_forward(on(s), as(e, out), rstd, as(e, inp), as(e, weight), eps,
                                       rows, c);
    });
  }
  void rms_norm_backward(Stream& s, Tensor dinp, float* dweight, ConstTensor dout, ConstTensor inp,
                         ConstTensor weight, const float* rstd, i64 rows, i64 c) override {
    run(common_type({dinp, dout, inp, weight}), "rms_norm_backward", [&](auto e) {
      return kernels::rms_norm_backward(on(s), as(e, dinp), dweight, as(e, dout), as(e, inp),
                                        as(e, weight), rstd, rows, c);
    });
  }
  void rope_forward(Stream& s, Tensor x, const float* inv_freq, const std::int32_t* start, i64 b,
                    i64 t, i64 heads, i64 head_dim, i64 row_stride) override {
    STRATA_ASSERT(head_dim % 2 == 0 && row_stride >= heads * head_dim);
    run(x.type, "rope_forward", [&](auto e) {
      return kernels::rope_forward(on(s), as(e, x), inv_freq, start, b, t, heads, head_dim,
                                   row_stride);
    });
  }
  void kv_cache_write(Stream& s, Tensor k_cache, Tensor v_cache, ConstTensor qkv,
                      const std::int32_t* start, i64 b, i64 tokens, i64 heads, i64 kv_heads,
                      i64 head_dim, i64 max_seq) override {
    run(common_type({k_cache, v_cache, qkv}), "kv_cache_write", [&](auto e) {
      return kernels::kv_cache_write(on(s), as(e, k_cache), as(e, v_cache), as(e, qkv), start, b,
                                     tokens, heads, kv_heads, head_dim, max_seq);
    });
  }
  void decode_attention(Stream& s, Tensor out, ConstTensor qkv, ConstTensor k_cache,
                        ConstTensor v_cache, const std::int32_t* length, float* scratch, i64 b,
                        i64 heads, i64 kv_heads, i64 head_dim, i64 max_seq) override {
    STRATA_ASSERT(heads % kv_heads == 0 && head_dim <= 256 && scratch != nullptr);
    run(common_type({out, qkv, k_cache, v_cache}), "decode_attention", [&](auto e) {
      return kernels::decode_attention(on(s), as(e, out), as(e, qkv), as(e, k_cache),
                                       as(e, v_cache), length, scratch, b, heads, kv_heads,
                                       head_dim, max_seq, kDecodeSplit);
    });
  }
  void rope_backward(Stream& s, Tensor dx, const float* inv_freq, i64 b, i64 t, i64 heads,
                     i64 head_dim, i64 row_stride) override {
    STRATA_ASSERT(head_dim % 2 == 0 && row_stride >= heads * head_dim);
    run(dx.type, "rope_backward", [&](auto e) {
      return kernels::rope_backward(on(s), as(e, dx), inv_freq, b, t, heads, head_dim, row_stride);
    });
  }
  void swiglu_forward(Stream& s, Tensor out, ConstTensor gate, ConstTensor up, i64 n) override {
    run(common_type({out, gate, up}), "swiglu_forward", [&](auto e) {
      return kernels::swiglu_forward(on(s), as(e, out), as(e, gate), as(e, up), n);
    });
  }
  void swiglu_backward(Stream& s, Tensor dgate, Tensor dup, ConstTensor dout, ConstTensor gate,
                       ConstTensor up, i64 n) override {
    run(common_type({dgate, dup, dout, gate, up}), "swiglu_backward", [&](auto e) {
      return kernels::swiglu_backward(on(s), as(e, dgate), as(e, dup), as(e, dout), as(e, gate),
                                      as(e, up), n);
    });
  }
  void qkv_pack_forward(Stream& s, Tensor qkv, ConstTensor q, ConstTensor k, ConstTensor v,
                        i64 rows, i64 heads, i64 kv_heads, i64 head_dim) override {
    STRATA_ASSERT(kv_heads > 0 && heads % kv_heads == 0);
    run(common_type({qkv, q, k, v}), "qkv_pack_forward", [&](auto e) {
      return kernels::qkv_pack_forward(on(s), as(e, qkv), as(e, q), as(e, k), as(e, v), rows, heads,
                                       kv_heads, head_dim);
    });
  }
  void qkv_pack_backward(Stream& s, Tensor dq, Tensor dk, Tensor dv, ConstTensor dqkv, i64 rows,
                         i64 heads, i64 kv_heads, i64 head_dim) override {
    STRATA_ASSERT(kv_heads > 0 && heads % kv_heads == 0);
    run(common_type({dq, dk, dv, dqkv}), "qkv_pack_backward", [&](auto e) {
      return kernels::qkv_pack_backward(on(s), as(e, dq), as(e, dk), as(e, dv), as(e, dqkv), rows,
                                        heads, kv_heads, head_dim);
    });
  }

  void cast_to_float(Stream& s, float* target, const void* source, DataType type, i64 n) override {
    run(type, "cast_to_float", [&](auto e) {
      return kernels::cast_to_float(on(s), target, as(e, ConstTensor(source, type)), n);
    });
  }
  void cast_from_float(Stream& s, void* target, DataType type, const float* source,
                       i64 n) override {
    run(type, "cast_from_float", [&](auto e) {
      return kernels::cast_from_float(on(s), as(e, Tensor(target, type)), source, n);
    });
  }
  void fill(Stream& s, float* target, float value, i64 n) override {
    launched(kernels::fill(on(s), target, value, n), "fill");
  }
  void accumulate(Stream& s, float* target, const float* source, float scale, i64 n) override {
    launched(kernels::accumulate(on(s), target, source, scale, n), "accumulate");
  }

  // The constants are cpu_adam's, computed here on the host exactly as cpu_adam::step computes
  // them; the kernel runs cpu_adam's update rules (kernels/optimizer.h).
  void adam_step(Stream& s, const cpu_adam::AdamConfig& config, i64 step, float grad_scale,
                 const OptimizerArrays& a, i64 n) override {
    cpu_adam::validate(config);
    STRATA_ASSERT(step >= 1);
    STRATA_ASSERT(a.exp_avg != nullptr && a.exp_avg_sq != nullptr);
    launched(kernels::adam_step(on(s), cpu_adam::detail::adam_args(config, step, grad_scale),
                                to_pointers(a), to_param_copy(a.copy_type), n),
             "adam_step");
  }
  void adagrad_step(Stream& s, const cpu_adam::AdagradConfig& config, i64 step, float grad_scale,
                    const OptimizerArrays& a, i64 n) override {
    cpu_adam::validate(config);
    STRATA_ASSERT(step >= 1);
    STRATA_ASSERT(a.exp_avg_sq != nullptr);
    launched(kernels::adagrad_step(on(s), cpu_adam::detail::adagrad_args(config, grad_scale),
                                   to_pointers(a), to_param_copy(a.copy_type), n),
             "adagrad_step");
  }
  void lion_step(Stream& s, const cpu_adam::LionConfig& config, i64 step, float grad_scale,
                 const OptimizerArrays& a, i64 n) override {
    cpu_adam::validate(config);
    STRATA_ASSERT(step >= 1);
    STRATA_ASSERT(a.exp_avg != nullptr);
    launched(kernels::lion_step(on(s), cpu_adam::detail::lion_args(config, grad_scale),
                                to_pointers(a), to_param_copy(a.copy_type), n),
             "lion_step");
  }
  OpsPathCounts path_counts() const override {
    OpsPathCounts counts;
    counts.attention_forward = forward_paths_.load();
    counts.attention_backward = backward_paths_.load();
    counts.matmul_epilogue = matmul_.epilogue_runs();
    counts.matmul_unfused = matmul_.unfused_runs();
    return counts;
  }

  void sum_squares(Stream& s, double* sum_squares, const float* values, i64 n) override {
    auto* partials = static_cast<double*>(
        norm_partials_.get(s, kernels::sum_squares_partials * static_cast<i64>(sizeof(double))));
    launched(kernels::sum_squares(on(s), sum_squares, partials, values, n), "sum_squares");
  }

 private:
  // The stream's handle for one kernel (kernel_launch.h); used only inside the launch's own
  // expression.
  CudaStream::Traced on(Stream& stream) {
    return kernel_stream(stream, device_.index());
  }

  // The kernels' shape, its limits asserted: whole groups of query heads per kv head, and a head
  // no wider than a warp's registers hold (kernels/attention.h).
  static kernels::AttentionShape attention_shape(i64 b, i64 t, i64 heads, i64 kv_heads,
                                                 i64 head_dim) {
    STRATA_ASSERT(b >= 0 && t >= 0);
    STRATA_ASSERT(heads > 0 && kv_heads > 0);
    STRATA_ASSERT(heads % kv_heads == 0);
    STRATA_ASSERT(head_dim > 0 && head_dim <= kernels::attention_head_dim_max);
    return kernels::AttentionShape{b, t, heads, kv_heads, head_dim};
  }

  // AttentionPathCounts, updated from the threads that enqueue work.
  struct AttentionPaths {
    std::atomic<i64> cudnn{0};
    std::atomic<i64> tensor_core{0};
    std::atomic<i64> cuda_core{0};

    AttentionPathCounts load() const {
      return {cudnn.load(), tensor_core.load(), cuda_core.load()};
    }
  };

  // One call of strata's own attention kernels.
  static void count(AttentionPaths& paths, kernels::AttentionKernels ran) {
    ++(ran == kernels::AttentionKernels::tensor_core ? paths.tensor_core : paths.cuda_core);
  }

  // launch(Element<T>{}) for the element type of `type`, its status checked as `op`'s.
  template <class Launch>
  static void run(DataType type, const char* op, Launch launch) {
    with_element(type, [&](auto e) { launched(launch(e), op); });
  }

  CudaDevice& device_;
  CudaMatmul matmul_;
  StreamScratch attention_scratch_;
  StreamScratch norm_partials_;
#if STRATA_HAVE_CUDNN
  std::unique_ptr<CudnnAttention> cudnn_attention_;  // null when OpsOptions turns it off
#endif
  AttentionPaths forward_paths_;
  AttentionPaths backward_paths_;
};

}  // namespace

std::unique_ptr<Ops> create_cuda_ops(Device& device, OpsOptions options) {
  return std::make_unique<CudaOps>(as_cuda_device(device), options);
}

}  // namespace strata::gpu::cuda
