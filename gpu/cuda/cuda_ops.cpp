// gpu::Ops for CUDA devices: the kernels of kernels.cu and fp32 matrix products through cuBLAS.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "base/assert.h"
#include "base/log.h"
#include "cpu_adam/detail/args.h"
#include "gpu/cuda/backend.h"
#include "gpu/cuda/cuda_check.h"
#include "gpu/cuda/cuda_device.h"
#include "gpu/cuda/cuda_stream.h"
#include "gpu/cuda/kernels.h"
#include "gpu/cuda/optimizer_kernels.h"

namespace strata::gpu::cuda {
namespace {

using i64 = std::int64_t;

void check_cublas(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(call) + " failed: " + cublasGetStatusString(status) + " (" +
                           cublasGetStatusName(status) + ")");
}

int to_int(i64 value) {
  STRATA_ASSERT(value >= 0 && value <= 0x7fffffff);
  return static_cast<int>(value);
}

// The matrix products are fp32 in, fp32 out, with CUBLAS_COMPUTE_32F: no TF32, so that they
// match the host backend's sgemm to fp32 rounding. TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) or bf16
// inputs (bf16 products with fp32 accumulation) would be faster, at the cost of that match.
constexpr cublasComputeType_t compute_type = CUBLAS_COMPUTE_32F;

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
  explicit CudaOps(CudaDevice& device) : device_(device) {}

  ~CudaOps() override {
    // Scratch buffers go first (they are device memory of device_); the handles after.
    scratch_.clear();
    norm_partials_.clear();
    for (auto& [stream, handle] : handles_) {
      cublasStatus_t status = cublasDestroy(handle);
      if (status != CUBLAS_STATUS_SUCCESS) {
        base::logger("gpu").error("cublasDestroy failed: {}", cublasGetStatusString(status));
      }
    }
  }

  void embedding_forward(Stream& s, Tensor out_t, const std::int32_t* tokens, ConstTensor wte_t, ConstTensor wpe_t, i64 b, i64 t, i64 c, i64 v) override {
    float* out = out_t.f32();
    const float* wte = wte_t.f32();
    const float* wpe = wpe_t.f32();
    launched(kernels::embedding_forward(on(s), out, tokens, wte, wpe, b, t, c, v),
             "embedding_forward");
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, ConstTensor dout_t, const std::int32_t* tokens, i64 b, i64 t, i64 c, i64 v) override {
    const float* dout = dout_t.f32();
    launched(kernels::embedding_backward(on(s), dwte, dwpe, dout, tokens, b, t, c, v),
             "embedding_backward");
  }
  void layer_norm_forward(Stream& s, Tensor out_t, float* mean, float* rstd, ConstTensor inp_t, ConstTensor weight_t, ConstTensor bias_t, i64 rows, i64 c) override {
    float* out = out_t.f32();
    const float* inp = inp_t.f32();
    const float* weight = weight_t.f32();
    const float* bias = bias_t.f32();
    launched(kernels::layer_norm_forward(on(s), out, mean, rstd, inp, weight, bias, rows, c),
             "layer_norm_forward");
  }
  void layer_norm_backward(Stream& s, Tensor dinp_t, float* dweight, float* dbias, ConstTensor dout_t, ConstTensor inp_t, ConstTensor weight_t, const float* mean, const float* rstd, i64 rows, i64 c) override {
    float* dinp = dinp_t.f32();
    const float* dout = dout_t.f32();
    const float* inp = inp_t.f32();
    const float* weight = weight_t.f32();
    launched(kernels::layer_norm_backward(on(s), dinp, dweight, dbias, dout, inp, weight, mean,
                                          rstd, rows, c),
             "layer_norm_backward");
  }

  // out[rows, out] = inp[rows, in] @ weight[out, in]^T + bias. cuBLAS is column-major, so a
  // row-major matrix is its transpose: out^T (out x rows) = A^T @ B with A = weight seen as
  // (in x out) and B = inp seen as (in x rows).
  void matmul_forward(Stream& s, Tensor out_t, ConstTensor inp_t, ConstTensor weight_t, ConstTensor bias_t, i64 rows, i64 in, i64 out_channels) override {
    float* out = out_t.f32();
    const float* inp = inp_t.f32();
    const float* weight = weight_t.f32();
    const float* bias = bias_t.f32();
    if (rows == 0 || out_channels == 0) return;
    const float one = 1.0f;
    const float zero = 0.0f;
    gemm(s, CUBLAS_OP_T, CUBLAS_OP_N, out_channels, rows, in, &one, weight, in, inp, in, &zero, out,
         out_channels);
    if (bias != nullptr) {
      launched(kernels::add_bias(on(s), out, bias, rows, out_channels), "matmul_forward bias");
    }
  }

  // dinp += dout @ weight; dweight += dout^T @ inp; dbias += column sums of dout.
  void matmul_backward(Stream& s, Tensor dinp_t, float* dweight, float* dbias, ConstTensor dout_t, ConstTensor inp_t, ConstTensor weight_t, i64 rows, i64 in, i64 out_channels) override {
    float* dinp = dinp_t.f32();
    const float* dout = dout_t.f32();
    const float* inp = inp_t.f32();
    const float* weight = weight_t.f32();
    if (rows == 0 || out_channels == 0 || in == 0) return;
    const float one = 1.0f;
    // Column-major: dinp^T (in x rows) += weight^T-as-stored (in x out) @ dout^T (out x rows).
    gemm(s, CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out_channels, &one, weight, in, dout, out_channels,
         &one, dinp, in);
    // Column-major: dweight^T (in x out) += inp^T (in x rows) @ dout (rows x out).
    gemm(s, CUBLAS_OP_N, CUBLAS_OP_T, in, out_channels, rows, &one, inp, in, dout, out_channels,
         &one, dweight, in);
    if (dbias != nullptr) {
      launched(kernels::column_sums_accumulate(on(s), dbias, dout, rows, out_channels),
               "matmul_backward dbias");
    }
  }

  // Until the bf16 kernels: the product, then the GELU kernel.
  void matmul_gelu_forward(Stream& s, Tensor out, Tensor pre, ConstTensor inp, ConstTensor weight,
                           ConstTensor bias, i64 rows, i64 in, i64 out_channels) override {
    matmul_forward(s, pre, inp, weight, bias, rows, in, out_channels);
    gelu_forward(s, out, pre, rows * out_channels);
  }
  void attention_forward(Stream& s, Tensor out_t, Tensor att_t, ConstTensor qkv_t, i64 b, i64 t, i64 c, i64 heads) override {
    float* out = out_t.f32();
    float* att = att_t.f32();
    const float* qkv = qkv_t.f32();
    STRATA_ASSERT(heads > 0 && c % heads == 0);
    launched(kernels::attention_forward(on(s), out, att, qkv, b, t, c, heads), "attention_forward");
  }
  void attention_backward(Stream& s, Tensor dqkv_t, ConstTensor dout_t, ConstTensor qkv_t, ConstTensor att_t, i64 b, i64 t, i64 c, i64 heads) override {
    float* dqkv = dqkv_t.f32();
    const float* dout = dout_t.f32();
    const float* qkv = qkv_t.f32();
    const float* att = att_t.f32();
    STRATA_ASSERT(heads > 0 && c % heads == 0);
    STRATA_ASSERT(c / heads <= kernels::attention_head_size_max);
    float* row_sums = scratch(s, b * heads * t);
    launched(kernels::attention_backward(on(s), dqkv, row_sums, dout, qkv, att, b, t, c, heads),
             "attention_backward");
  }
  void gelu_forward(Stream& s, Tensor out_t, ConstTensor inp_t, i64 n) override {
    float* out = out_t.f32();
    const float* inp = inp_t.f32();
    launched(kernels::gelu_forward(on(s), out, inp, n), "gelu_forward");
  }
  void gelu_backward(Stream& s, Tensor dinp_t, ConstTensor inp_t, ConstTensor dout_t, i64 n) override {
    float* dinp = dinp_t.f32();
    const float* inp = inp_t.f32();
    const float* dout = dout_t.f32();
    launched(kernels::gelu_backward(on(s), dinp, inp, dout, n), "gelu_backward");
  }
  void residual_forward(Stream& s, Tensor out_t, ConstTensor a_t, ConstTensor b_t, i64 n) override {
    float* out = out_t.f32();
    const float* a = a_t.f32();
    const float* b = b_t.f32();
    launched(kernels::residual_forward(on(s), out, a, b, n), "residual_forward");
  }
  void residual_backward(Stream& s, Tensor da_t, Tensor db_t, ConstTensor dout_t, i64 n) override {
    float* da = da_t.f32();
    float* db = db_t.f32();
    const float* dout = dout_t.f32();
    launched(kernels::residual_backward(on(s), da, db, dout, n), "residual_backward");
  }
  void rms_norm_forward(Stream& s, Tensor out_t, float* rstd, ConstTensor inp_t, ConstTensor weight_t, double eps, i64 rows, i64 c) override {
    float* out = out_t.f32();
    const float* inp = inp_t.f32();
    const float* weight = weight_t.f32();
    launched(kernels::rms_norm_forward(on(s), out, rstd, inp, weight, eps, rows, c),
             "rms_norm_forward");
  }
  void rms_norm_backward(Stream& s, Tensor dinp_t, float* dweight, ConstTensor dout_t, ConstTensor inp_t, ConstTensor weight_t, const float* rstd, i64 rows, i64 c) override {
    float* dinp = dinp_t.f32();
    const float* dout = dout_t.f32();
    const float* inp = inp_t.f32();
    const float* weight = weight_t.f32();
    launched(kernels::rms_norm_backward(on(s), dinp, dweight, dout, inp, weight, rstd, rows, c),
             "rms_norm_backward");
  }
  void rope_forward(Stream& s, Tensor x_t, const float* inv_freq, i64 b, i64 t, i64 heads, i64 head_dim, i64 row_stride) override {
    float* x = x_t.f32();
    STRATA_ASSERT(head_dim % 2 == 0 && row_stride >= heads * head_dim);
    launched(kernels::rope_forward(on(s), x, inv_freq, b, t, heads, head_dim, row_stride),
             "rope_forward");
  }
  void rope_backward(Stream& s, Tensor dx_t, const float* inv_freq, i64 b, i64 t, i64 heads, i64 head_dim, i64 row_stride) override {
    float* dx = dx_t.f32();
    STRATA_ASSERT(head_dim % 2 == 0 && row_stride >= heads * head_dim);
    launched(kernels::rope_backward(on(s), dx, inv_freq, b, t, heads, head_dim, row_stride),
             "rope_backward");
  }
  void swiglu_forward(Stream& s, Tensor out_t, ConstTensor gate_t, ConstTensor up_t, i64 n) override {
    float* out = out_t.f32();
    const float* gate = gate_t.f32();
    const float* up = up_t.f32();
    launched(kernels::swiglu_forward(on(s), out, gate, up, n), "swiglu_forward");
  }
  void swiglu_backward(Stream& s, Tensor dgate_t, Tensor dup_t, ConstTensor dout_t, ConstTensor gate_t, ConstTensor up_t, i64 n) override {
    float* dgate = dgate_t.f32();
    float* dup = dup_t.f32();
    const float* dout = dout_t.f32();
    const float* gate = gate_t.f32();
    const float* up = up_t.f32();
    launched(kernels::swiglu_backward(on(s), dgate, dup, dout, gate, up, n), "swiglu_backward");
  }
  void qkv_pack_forward(Stream& s, Tensor qkv_t, ConstTensor q_t, ConstTensor k_t, ConstTensor v_t, i64 rows, i64 heads, i64 kv_heads, i64 head_dim) override {
    float* qkv = qkv_t.f32();
    const float* q = q_t.f32();
    const float* k = k_t.f32();
    const float* v = v_t.f32();
    STRATA_ASSERT(kv_heads > 0 && heads % kv_heads == 0);
    launched(kernels::qkv_pack_forward(on(s), qkv, q, k, v, rows, heads, kv_heads, head_dim),
             "qkv_pack_forward");
  }
  void qkv_pack_backward(Stream& s, Tensor dq_t, Tensor dk_t, Tensor dv_t, ConstTensor dqkv_t, i64 rows, i64 heads, i64 kv_heads, i64 head_dim) override {
    float* dq = dq_t.f32();
    float* dk = dk_t.f32();
    float* dv = dv_t.f32();
    const float* dqkv = dqkv_t.f32();
    STRATA_ASSERT(kv_heads > 0 && heads % kv_heads == 0);
    launched(kernels::qkv_pack_backward(on(s), dq, dk, dv, dqkv, rows, heads, kv_heads, head_dim),
             "qkv_pack_backward");
  }
  void cross_entropy_forward(Stream& s, float* losses, float* lse, float* loss_mean, ConstTensor logits_t, const std::int32_t* targets, i64 rows, i64 v, i64 vp) override {
    const float* logits = logits_t.f32();
    STRATA_ASSERT(v > 0 && v <= vp);
    launched(
        kernels::cross_entropy_forward(on(s), losses, lse, loss_mean, logits, targets, rows, v, vp),
        "cross_entropy_forward");
  }
  void cross_entropy_backward(Stream& s, Tensor dlogits_t, ConstTensor logits_t, const float* lse, const std::int32_t* targets, const float* dlosses, i64 rows, i64 v, i64 vp) override {
    float* dlogits = dlogits_t.f32();
    const float* logits = logits_t.f32();
    STRATA_ASSERT(v > 0 && v <= vp);
    launched(
        kernels::cross_entropy_backward(on(s), dlogits, logits, lse, targets, dlosses, rows, v, vp),
        "cross_entropy_backward");
  }
  void cast_to_float(Stream& s, float* target, const void* source, DataType type, i64 n) override {
    const auto* half = static_cast<const std::uint16_t*>(source);
    switch (type) {
      case DataType::float32:
        s.copy(target, source, n * 4, CopyKind::device_to_device);
        return;
      case DataType::bfloat16:
        launched(kernels::cast_bf16_to_fp32(on(s), target, half, n), "cast_to_float");
        return;
      case DataType::float16:
        launched(kernels::cast_fp16_to_fp32(on(s), target, half, n), "cast_to_float");
        return;
      default:
        STRATA_ASSERT(false && "cast_to_float takes floating-point types only");
    }
  }
  void cast_from_float(Stream& s, void* target, DataType type, const float* source, i64 n) override {
    auto* half = static_cast<std::uint16_t*>(target);
    switch (type) {
      case DataType::float32:
        s.copy(target, source, n * 4, CopyKind::device_to_device);
        return;
      case DataType::bfloat16:
        launched(kernels::cast_fp32_to_bf16(on(s), half, source, n), "cast_from_float");
        return;
      case DataType::float16:
        launched(kernels::cast_fp32_to_fp16(on(s), half, source, n), "cast_from_float");
        return;
      default:
        STRATA_ASSERT(false && "cast_from_float takes floating-point types only");
    }
  }
  void fill(Stream& s, float* target, float value, i64 n) override {
    launched(kernels::fill(on(s), target, value, n), "fill");
  }
  void accumulate(Stream& s, float* target, const float* source, float scale, i64 n) override {
    launched(kernels::accumulate(on(s), target, source, scale, n), "accumulate");
  }

  // The constants are cpu_adam's, computed here on the host exactly as cpu_adam::step computes
  // them; the kernel runs cpu_adam's update rules (optimizer_kernels.h).
  void adam_step(Stream& s, const cpu_adam::AdamConfig& config, i64 step, float grad_scale, const OptimizerArrays& a, i64 n) override {
    cpu_adam::validate(config);
    STRATA_ASSERT(step >= 1);
    STRATA_ASSERT(a.exp_avg != nullptr && a.exp_avg_sq != nullptr);
    launched(kernels::adam_step(on(s), cpu_adam::detail::adam_args(config, step, grad_scale),
                                to_pointers(a), to_param_copy(a.copy_type), n),
             "adam_step");
  }
  void adagrad_step(Stream& s, const cpu_adam::AdagradConfig& config, i64 step, float grad_scale, const OptimizerArrays& a, i64 n) override {
    cpu_adam::validate(config);
    STRATA_ASSERT(step >= 1);
    STRATA_ASSERT(a.exp_avg_sq != nullptr);
    launched(kernels::adagrad_step(on(s), cpu_adam::detail::adagrad_args(config, grad_scale),
                                   to_pointers(a), to_param_copy(a.copy_type), n),
             "adagrad_step");
  }
  void lion_step(Stream& s, const cpu_adam::LionConfig& config, i64 step, float grad_scale, const OptimizerArrays& a, i64 n) override {
    cpu_adam::validate(config);
    STRATA_ASSERT(step >= 1);
    STRATA_ASSERT(a.exp_avg != nullptr);
    launched(kernels::lion_step(on(s), cpu_adam::detail::lion_args(config, grad_scale),
                                to_pointers(a), to_param_copy(a.copy_type), n),
             "lion_step");
  }
  void sum_squares(Stream& s, double* sum_squares, const float* values, i64 n) override {
    double* partials = norm_partials(s);
    launched(kernels::sum_squares(on(s), sum_squares, partials, values, n), "sum_squares");
  }

 private:
  // The stream's handle for one kernel, with this device current on the calling thread (kernels
  // launch on the current device). It is the kernel's op on the stream's timeline row, so it is
  // used only inside the launch's own expression (CudaStream::Traced).
  CudaStream::Traced on(Stream& stream) {
    use_device(device_.index());
    return as_cuda_stream(stream).traced("kernel");
  }

  static void launched(cudaError_t status, const char* op) {
    check(status, (std::string("kernel launch for ") + op).c_str());
  }

  // One cuBLAS handle per stream, made on first use: a handle's workspace must not be shared by
  // products running at once on two streams.
  void gemm(Stream& stream, cublasOperation_t op_a, cublasOperation_t op_b, i64 m, i64 n, i64 k,
            const float* alpha, const float* a, i64 lda, const float* b, i64 ldb, const float* beta,
            float* c, i64 ldc) {
    // The lock comes before the timeline's op, as in scratch(), which may synchronize the stream.
    std::lock_guard lock(mutex_);
    const CudaStream::Traced cuda_stream = on(stream);
    auto found = handles_.find(cuda_stream);
    if (found == handles_.end()) {
      cublasHandle_t handle = nullptr;
      check_cublas(cublasCreate(&handle), "cublasCreate");
      check_cublas(cublasSetStream(handle, cuda_stream), "cublasSetStream");
      found = handles_.emplace(cuda_stream, handle).first;
    }
    check_cublas(cublasGemmEx(found->second, op_a, op_b, to_int(m), to_int(n), to_int(k), alpha, a,
                              CUDA_R_32F, to_int(lda), b, CUDA_R_32F, to_int(ldb), beta, c,
                              CUDA_R_32F, to_int(ldc), compute_type, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  }

  // `floats` of scratch for work on `stream`, kept per stream (two streams may run the op at
  // once) and grown when a call needs more. Growing first synchronizes the stream, so the old
  // buffer is freed with no work queued on it (the DeviceBuffer rule); it happens on the first
  // steps only. The scratch counts against the device budget as "attention scratch".
  float* scratch(Stream& stream, i64 floats) {
    std::lock_guard lock(mutex_);
    DeviceBuffer& buffer = scratch_[&stream];
    if (buffer.bytes() < floats * 4) {
      if (buffer) stream.synchronize();
      buffer.reset();
      buffer = device_.allocate(floats * 4, "attention scratch");
    }
    return buffer.as<float>();
  }

  // The partial sums of sum_squares for work on `stream`, one buffer per stream (two streams may
  // run it at once), made on first use and never grown.
  double* norm_partials(Stream& stream) {
    std::lock_guard lock(mutex_);
    DeviceBuffer& buffer = norm_partials_[&stream];
    if (!buffer) {
      buffer = device_.allocate(kernels::sum_squares_partials * static_cast<i64>(sizeof(double)),
                                "gradient norm partial sums");
    }
    return buffer.as<double>();
  }

  CudaDevice& device_;
  std::mutex mutex_;
  std::map<const Stream*, DeviceBuffer> norm_partials_;
  std::map<cudaStream_t, cublasHandle_t> handles_;
  std::map<const Stream*, DeviceBuffer> scratch_;
};

}  // namespace

std::unique_ptr<Ops> create_cuda_ops(Device& device, OpsOptions /*options*/) {
  return std::make_unique<CudaOps>(as_cuda_device(device));
}

}  // namespace strata::gpu::cuda
