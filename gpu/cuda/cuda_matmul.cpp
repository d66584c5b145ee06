#include "gpu/cuda/cuda_matmul.h"

#include <cuda_runtime.h>

#include <atomic>
#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/assert.h"
#include "base/log.h"
#include "gpu/cuda/cublaslt_library.h"
#include "gpu/cuda/cuda_device.h"
#include "gpu/cuda/element_dispatch.h"
#include "gpu/cuda/kernel_launch.h"
#include "gpu/cuda/kernels/matmul.h"
#include "gpu/cuda/stream_scratch.h"

namespace strata::gpu::cuda {
namespace {

using i64 = std::int64_t;

// Each stream's workspace: llm.c's size for Hopper, enough for cuBLASLt's split-K algorithms.
constexpr i64 workspace_bytes = i64{32} << 20;
// cuBLASLt's default minimum-alignment preference, the most any of its kernels asks for.
constexpr std::uint32_t alignment_max_bytes = 256;
// cuBLASLt takes the GELU input's leading dimension only as a multiple of 8 (cublasLt.h,
// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD).
constexpr i64 gelu_input_ld_multiple = 8;
// The alignment below which the bias and GELU-input pointers skip the epilogue (cuda_matmul.h).
constexpr std::uint32_t epilogue_pointer_alignment = 16;

// The status's name as cublas_api.h spells it. cuBLASLt has no cublasGetStatusName of its own;
// that one is libcublas's, which strata does not link.
const char* status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "an unknown cuBLAS status";
}

void check_cublas(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(call) + " failed: " + status_name(status) + " (" +
                           std::to_string(static_cast<int>(status)) + ")");
}

// The largest power of two, at most 256, that divides the address: the alignment cuBLASLt may
// assume of the pointer. Worked example: 0x7f0000000104 is divisible by 4 but not by 8, so 4.
std::uint32_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::uint32_t alignment = alignment_max_bytes;
  while (alignment > 1 && address % alignment != 0)
    alignment /= 2;
  return alignment;
}

cudaDataType_t cuda_type(DataType type) {
  switch (type) {
    case DataType::bfloat16:
      return CUDA_R_16BF;
    case DataType::float16:
      return CUDA_R_16F;
    default:
      STRATA_ASSERT(type == DataType::float32);
      return CUDA_R_32F;
  }
}

// One product in cuBLASLt's column-major terms, D = op(A) op(B) + beta D (C is D itself):
// op(A) is m x k, op(B) k x n, D m x n. A row-major matrix is its column-major transpose, which is
// how gpu::Ops' row-major products map onto these (CudaMatmul's forward and backward).
struct Product {
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  i64 m = 0, n = 0, k = 0;
  const void* a = nullptr;
  i64 lda = 0;
  const void* b = nullptr;
  i64 ldb = 0;
  void* d = nullptr;
  i64 ldd = 0;
  cudaDataType_t ab_type = CUDA_R_32F;
  cudaDataType_t d_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // m values of d_type
  void* aux = nullptr;         // GELU's input, laid out as D
  float beta = 0.0f;
};

// What a plan depends on: everything of a Product but its pointers, and their alignments.
struct PlanKey {
  cublasOperation_t trans_a, trans_b;
  i64 m, n, k, lda, ldb, ldd;
  cudaDataType_t ab_type, d_type;
  cublasComputeType_t compute;
  cublasLtEpilogue_t epilogue;
  std::uint32_t align_a, align_b, align_d, align_bias, align_aux;

  explicit PlanKey(const Product& p)
      : trans_a(p.trans_a),
        trans_b(p.trans_b),
        m(p.m),
        n(p.n),
        k(p.k),
        lda(p.lda),
        ldb(p.ldb),
        ldd(p.ldd),
        ab_type(p.ab_type),
        d_type(p.d_type),
        compute(p.compute),
        epilogue(p.epilogue),
        align_a(alignment_of(p.a)),
        align_b(alignment_of(p.b)),
        align_d(alignment_of(p.d)),
        align_bias(alignment_of(p.bias)),
        align_aux(alignment_of(p.aux)) {}
  auto operator<=>(const PlanKey&) const = default;
};

template <class T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value) {
  check_cublas(cublaslt().desc_set_attribute(desc, attribute, &value, sizeof(value)),
               "cublasLtMatmulDescSetAttribute");
}

// The descriptors of one PlanKey and the algorithm cuBLASLt's heuristic picked for it, made once;
// `usable` is false where the heuristic had none (then nothing is kept).
class Plan {
 public:
  Plan(cublasLtHandle_t handle, const Product& product) {
    try {
      describe(product);
      find_algorithm(handle, product);
    } catch (...) {
      release();
      throw;
    }
    if (!usable_) release();
  }
  ~Plan() { release(); }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  bool usable() const { return usable_; }

  // Enqueues `product` (whose key is this plan's) on `stream`.
  void run(cublasLtHandle_t handle, const Product& product, void* workspace,
           cudaStream_t stream) const {
    STRATA_ASSERT(usable_);
    set_pointers(product);
    const float alpha = 1.0f;
    check_cublas(cublaslt().matmul(handle, desc_, &alpha, product.a, a_, product.b, b_,
                                   &product.beta, product.d, d_, product.d, d_, &algo_, workspace,
                                   static_cast<std::size_t>(workspace_bytes), stream),
                 "cublasLtMatmul");
  }

 private:
  void describe(const Product& p) {
    check_cublas(cublaslt().desc_create(&desc_, p.compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    set_attribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, p.trans_a);
    set_attribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, p.trans_b);
    set_attribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
    if (p.aux != nullptr) set_attribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.ldd);
    const bool a_plain = p.trans_a == CUBLAS_OP_N;
    const bool b_plain = p.trans_b == CUBLAS_OP_N;
    check_cublas(
        cublaslt().layout_create(&a_, p.ab_type, static_cast<std::uint64_t>(a_plain ? p.m : p.k),
                                 static_cast<std::uint64_t>(a_plain ? p.k : p.m), p.lda),
        "cublasLtMatrixLayoutCreate");
    check_cublas(
        cublaslt().layout_create(&b_, p.ab_type, static_cast<std::uint64_t>(b_plain ? p.k : p.n),
                                 static_cast<std::uint64_t>(b_plain ? p.n : p.k), p.ldb),
        "cublasLtMatrixLayoutCreate");
    check_cublas(cublaslt().layout_create(&d_, p.d_type, static_cast<std::uint64_t>(p.m),
                                          static_cast<std::uint64_t>(p.n), p.ldd),
                 "cublasLtMatrixLayoutCreate");
  }

  // The heuristic's best algorithm for the product's shapes, types and alignments: the minimum
  // alignment preferences are the pointers' own, and it reads the bias and GELU-input pointers
  // from the descriptor.
  void find_algorithm(cublasLtHandle_t handle, const Product& p) {
    set_pointers(p);
    cublasLtMatmulPreference_t preference = nullptr;
    check_cublas(cublaslt().preference_create(&preference), "cublasLtMatmulPreferenceCreate");
    const PlanKey key(p);
    const auto workspace = static_cast<std::uint64_t>(workspace_bytes);
    const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d}};
    cublasStatus_t status = cublaslt().preference_set_attribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
    for (const auto& [attribute, bytes] : alignments) {
      if (status == CUBLAS_STATUS_SUCCESS)
        status = cublaslt().preference_set_attribute(preference, attribute, &bytes, sizeof(bytes));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublaslt().algo_get_heuristic(handle, desc_, a_, b_, d_, d_, preference, 1, &result,
                                             &found);
    }
    cublaslt().preference_destroy(preference);
    // NOT_SUPPORTED is the heuristic's answer for "no algorithm", as is an empty result. With an
    // epilogue, INVALID_VALUE is taken as the same answer (an attribute the epilogue cannot take
    // from this product), since the product can still run without it; without one it is a bug.
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) return;
    if (status == CUBLAS_STATUS_INVALID_VALUE && p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) return;
    check_cublas(status, "cublasLtMatmulAlgoGetHeuristic");
    usable_ = found > 0;
    algo_ = result.algo;
  }

  void set_pointers(const Product& p) const {
    if (p.bias != nullptr) set_attribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
    if (p.aux != nullptr) set_attribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
  }

  void release() noexcept {
    if (a_ != nullptr) cublaslt().layout_destroy(a_);
    if (b_ != nullptr) cublaslt().layout_destroy(b_);
    if (d_ != nullptr) cublaslt().layout_destroy(d_);
    if (desc_ != nullptr) cublaslt().desc_destroy(desc_);
    a_ = b_ = d_ = nullptr;
    desc_ = nullptr;
  }

  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr;
  cublasLtMatrixLayout_t b_ = nullptr;
  cublasLtMatrixLayout_t d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  bool usable_ = false;
};

}  // namespace

struct CudaMatmul::Impl {
  Impl(CudaDevice& cuda_device, OpsOptions options)
      : device(cuda_device),
        fp32_compute(options.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F),
        workspaces(cuda_device, "cuBLASLt workspace"),
        products(cuda_device, "matmul fp32 product") {
    use_device(device.index());
    check_cublas(cublaslt().create(&handle), "cublasLtCreate");
  }

  ~Impl() {
    // The plans and the device memory go before the handle.
    plans.clear();
    workspaces.clear();
    products.clear();
    const cublasStatus_t status = cublaslt().destroy(handle);
    if (status != CUBLAS_STATUS_SUCCESS) {
      base::logger("gpu").error("cublasLtDestroy failed: {}", status_name(status));
    }
  }

  // The compute type of products whose A and B are `ab_type`: fp32 accumulation always; TF32
  // tensor-core inputs for fp32 products when OpsOptions::tf32 allows them.
  cublasComputeType_t compute_for(cudaDataType_t ab_type) const {
    return ab_type == CUDA_R_32F ? fp32_compute : CUBLAS_COMPUTE_32F;
  }

  // Enqueues `product` on `stream` if cuBLASLt has an algorithm for it; false, with nothing
  // enqueued, if not.
  bool try_run(Stream& stream, const Product& product) {
    // The workspace first: growing it may synchronize the stream, which the timeline's op below
    // must not span.
    void* workspace = workspaces.get(stream, workspace_bytes);
    std::lock_guard lock(mutex);
    std::unique_ptr<Plan>& plan = plans[PlanKey(product)];
    if (!plan) plan = std::make_unique<Plan>(handle, product);
    if (!plan->usable()) return false;
    plan->run(handle, product, workspace, kernel_stream(stream, device.index()));
    return true;
  }

  void run(Stream& stream, const Product& product, const char* what) {
    if (try_run(stream, product)) return;
    throw std::runtime_error(std::string("cuBLASLt has no algorithm for the ") + what +
                             " product (m " + std::to_string(product.m) + ", n " +
                             std::to_string(product.n) + ", k " + std::to_string(product.k) + ")");
  }

  // The product with no epilogue into fp32 (for 16-bit Tensors into scratch: 16-bit A and B with an
  // fp32 D, the backward's combination), then bias and GELU by a kernel that rounds once.
  void forward_without_epilogue(Stream& stream, const Product& p, Tensor out, Tensor pre,
                                ConstTensor bias, DataType type) {
    Product plain = p;
    plain.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    plain.bias = nullptr;
    plain.aux = nullptr;
    plain.d_type = CUDA_R_32F;
    if (type == DataType::float32) {
      plain.d = pre ? pre.data : out.data;
    } else {
      plain.d = products.get(stream, p.m * p.n * i64{4});
    }
    run(stream, plain, "matmul_forward");
    const auto* product = static_cast<const float*>(plain.d);
    with_element(type, [&](auto e) {
      launched(kernels::finish_product(kernel_stream(stream, device.index()), as(e, out),
                                       as(e, pre), product, as(e, bias), p.n, p.m),
               "matmul_forward epilogue");
    });
  }

  CudaDevice& device;
  cublasComputeType_t fp32_compute;
  cublasLtHandle_t handle = nullptr;
  StreamScratch workspaces;
  StreamScratch products;
  std::mutex mutex;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  std::atomic<i64> epilogue_runs{0};
  std::atomic<i64> unfused_runs{0};
};

CudaMatmul::CudaMatmul(CudaDevice& device, OpsOptions options)
    : impl_(std::make_unique<Impl>(device, options)) {}

CudaMatmul::~CudaMatmul() = default;

// out[rows, out] = inp[rows, in] @ weight[out, in]^T + bias. Column-major, out^T (out x rows) is
// op_T(weight seen as in x out) @ (inp seen as in x rows): m = out, n = rows, k = in; the bias is
// one value per row of D, as cuBLASLt's bias epilogue adds it.
void CudaMatmul::forward(Stream& stream, Tensor out, Tensor pre, ConstTensor inp,
                         ConstTensor weight, ConstTensor bias, i64 rows, i64 in_channels,
                         i64 out_channels) {
  const DataType type = common_type({out, pre, inp, weight, bias});
  if (rows == 0 || out_channels == 0) return;
  STRATA_ASSERT(in_channels > 0);
  const bool gelu = static_cast<bool>(pre);
  Product p;
  p.trans_a = CUBLAS_OP_T;
  p.m = out_channels;
  p.n = rows;
  p.k = in_channels;
  p.a = weight.data;
  p.lda = in_channels;
  p.b = inp.data;
  p.ldb = in_channels;
  p.d = out.data;
  p.ldd = out_channels;
  p.ab_type = p.d_type = cuda_type(type);
  p.compute = impl_->compute_for(p.ab_type);
  p.bias = bias.data;
  if (gelu) {
    p.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    p.aux = pre.data;
  } else if (bias) {
    p.epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  const bool wants_epilogue = p.epilogue != CUBLASLT_EPILOGUE_DEFAULT;
  const bool epilogue_takes = (!gelu || out_channels % gelu_input_ld_multiple == 0) &&
                              alignment_of(p.bias) >= epilogue_pointer_alignment &&
                              alignment_of(p.aux) >= epilogue_pointer_alignment;
  if (epilogue_takes && impl_->try_run(stream, p)) {
    if (wants_epilogue) ++impl_->epilogue_runs;
    return;
  }
  if (wants_epilogue) ++impl_->unfused_runs;
  impl_->forward_without_epilogue(stream, p, out, pre, bias, type);
}

std::int64_t CudaMatmul::epilogue_runs() const {
  return impl_->epilogue_runs.load();
}

std::int64_t CudaMatmul::unfused_runs() const {
  return impl_->unfused_runs.load();
}

// dinp += dout @ weight: column-major dinp^T (in x rows) += (weight seen as in x out) @ (dout seen
// as out x rows). dweight += dout^T @ inp: column-major dweight^T (in x out) += (inp seen as
// in x rows) @ op_T(dout seen as out x rows). dbias += column sums of dout.
void CudaMatmul::backward(Stream& stream, Tensor dinp, float* dweight, float* dbias,
                          ConstTensor dout, ConstTensor inp, ConstTensor weight, i64 rows,
                          i64 in_channels, i64 out_channels) {
  const DataType type = common_type({dinp, dout, inp, weight});
  if (rows == 0 || out_channels == 0 || in_channels == 0) return;
  Product input;
  input.m = in_channels;
  input.n = rows;
  input.k = out_channels;
  input.a = weight.data;
  input.lda = in_channels;
  input.b = dout.data;
  input.ldb = out_channels;
  input.d = dinp.data;
  input.ldd = in_channels;
  input.ab_type = input.d_type = cuda_type(type);
  input.compute = impl_->compute_for(input.ab_type);
  input.beta = 1.0f;
  impl_->run(stream, input, "matmul_backward dinp");

  Product weights;
  weights.trans_b = CUBLAS_OP_T;
  weights.m = in_channels;
  weights.n = out_channels;
  weights.k = rows;
  weights.a = inp.data;
  weights.lda = in_channels;
  weights.b = dout.data;
  weights.ldb = out_channels;
  weights.d = dweight;
  weights.ldd = in_channels;
  weights.ab_type = cuda_type(type);
  weights.d_type = CUDA_R_32F;
  weights.compute = impl_->compute_for(weights.ab_type);
  weights.beta = 1.0f;
  impl_->run(stream, weights, "matmul_backward dweight");

  if (dbias == nullptr) return;
  with_element(type, [&](auto e) {
    launched(kernels::column_sums_accumulate(kernel_stream(stream, impl_->device.index()), dbias,
                                             as(e, dout), rows, out_channels),
             "matmul_backward dbias");
  });
}

}  // namespace strata::gpu::cuda
