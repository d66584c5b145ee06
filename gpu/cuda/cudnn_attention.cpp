#include "gpu/cuda/cudnn_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "base/log.h"
#include "gpu/cuda/cuda_device.h"
#include "gpu/cuda/cudnn_attention_graphs.h"
#include "gpu/cuda/cudnn_graph.h"
#include "gpu/cuda/cudnn_library.h"
#include "gpu/cuda/element_dispatch.h"
#include "gpu/cuda/kernel_launch.h"
#include "gpu/cuda/kernels/residual.h"
#include "gpu/cuda/stream_scratch.h"

namespace strata::gpu::cuda {
namespace {

using i64 = std::int64_t;

constexpr i64 element_bytes = 2;  // cuDNN's fused attention is bfloat16 or float16
constexpr i64 alignment = 16;

// The graph `state` states for the call's layout, planned.
template <class State>
GraphBuilder::Plan make_plan(cudnnHandle_t handle, const AttentionLayout& l, cudnnDataType_t io,
                             State state) {
  GraphBuilder graph;
  state(graph, l, io);
  return graph.plan(handle);
}

enum class Direction { forward, backward };

i64 round_up(i64 bytes) {
  return (bytes + 255) / 256 * 256;
}

// Whether cuDNN's attention may take a call: 16-bit, not empty, rows of whole 16-byte vectors
// (K and V start head_dim elements apart) and every pointer 16-byte aligned.
bool cudnn_may_take(DataType type, const AttentionLayout& l,
                    std::initializer_list<const void*> pointers) {
  if (type == DataType::float32 || l.b * l.t == 0 || l.d * element_bytes % alignment != 0)
    return false;
  for (const void* pointer : pointers) {
    if (reinterpret_cast<std::uintptr_t>(pointer) % alignment != 0) return false;
  }
  return true;
}

// 1 / sqrt(head_dim), as strata's kernels scale the scores.
float scores_scale(i64 head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

const char* direction_name(Direction direction) {
  return direction == Direction::forward ? "forward" : "backward";
}

}  // namespace

struct CudnnAttention::Impl {
  using Key = std::tuple<Direction, DataType, i64, i64, i64, i64, i64>;

  explicit Impl(CudaDevice& cuda_device)
      : device(cuda_device), workspaces(cuda_device, "cuDNN attention workspace") {}

  ~Impl() {
    plans.clear();
    workspaces.clear();
    if (handle != nullptr) cudnn().destroy(handle);
  }

  // The handle, made at the first call; null, logged once, where cuDNN cannot be loaded or
  // started here.
  cudnnHandle_t ready_handle() {
    if (handle != nullptr || !unavailable.empty()) return handle;
    try {
      use_device(device.index());
      check_cudnn(cudnn().create(&handle), "cudnnCreate");
      base::logger("gpu").info("attention: cuDNN's fused attention where it takes the shape, {}",
                               cudnn_description());
    } catch (const std::exception& error) {
      handle = nullptr;
      unavailable = error.what();
      base::logger("gpu").info("attention: strata's kernels, cuDNN is not usable: {}", unavailable);
    }
    return handle;
  }

  // The plan for the call, built at its first call; null where cuDNN is not usable here or
  // builds none (each logged once).
  const GraphBuilder::Plan* plan_for(Direction direction, DataType type, const AttentionLayout& l) {
    if (ready_handle() == nullptr) return nullptr;
    const Key key{direction, type, l.b, l.t, l.h, l.hk, l.d};
    auto found = plans.find(key);
    if (found != plans.end()) return found->second ? &*found->second : nullptr;
    const cudnnDataType_t io = type == DataType::bfloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    std::optional<GraphBuilder::Plan> plan;
    try {
      plan.emplace(direction == Direction::forward
                       ? make_plan(handle, l, io, state_attention_forward)
                       : make_plan(handle, l, io, state_attention_backward));
    } catch (const CudnnRefused& refused) {
      base::logger("gpu").info(
          "attention {} B{} T{} H{}/{} D{} {}: cuDNN builds no plan, strata's kernels run it "
          "({})",
          direction_name(direction), l.b, l.t, l.h, l.hk, l.d, to_string(type), refused.what());
    }
    found = plans.emplace(key, std::move(plan)).first;
    return found->second ? &*found->second : nullptr;
  }

  CudaDevice& device;
  StreamScratch workspaces;
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
  std::string unavailable;  // why cuDNN cannot run here, once known
  std::map<Key, std::optional<GraphBuilder::Plan>> plans;
};

CudnnAttention::CudnnAttention(CudaDevice& device) : impl_(std::make_unique<Impl>(device)) {}

CudnnAttention::~CudnnAttention() = default;

bool CudnnAttention::forward(Stream& stream, Tensor out, float* lse, ConstTensor qkv,
                             const kernels::AttentionShape& shape) {
  const AttentionLayout l{shape.batch, shape.seq_len, shape.heads, shape.kv_heads, shape.head_dim};
  if (!cudnn_may_take(qkv.type, l, {qkv.data, out.data, lse})) return false;
  std::lock_guard lock(impl_->mutex);
  const GraphBuilder::Plan* plan = impl_->plan_for(Direction::forward, qkv.type, l);
  if (plan == nullptr) return false;
  void* workspace = impl_->workspaces.get(stream, std::max<i64>(plan->workspace_bytes, 1));
  float scale = scores_scale(l.d);
  float minus_infinity = -INFINITY;
  auto* rows = static_cast<char*>(const_cast<void*>(qkv.data));
  const std::vector<i64> uids = {
      q_uid, k_uid, v_uid, out_uid, lse_uid, scale_uid, minus_infinity_uid};
  const std::vector<void*> pointers = {rows,
                                       rows + l.k_offset() * element_bytes,
                                       rows + l.v_offset() * element_bytes,
                                       out.data,
                                       lse,
                                       &scale,
                                       &minus_infinity};
  execute_plan(impl_->handle, kernel_stream(stream, impl_->device.index()), plan->plan, uids,
               pointers, workspace);
  return true;
}

bool CudnnAttention::backward(Stream& stream, Tensor dqkv, ConstTensor dout, ConstTensor qkv,
                              ConstTensor out, const float* lse,
                              const kernels::AttentionShape& shape) {
  const AttentionLayout l{shape.batch, shape.seq_len, shape.heads, shape.kv_heads, shape.head_dim};
  if (!cudnn_may_take(qkv.type, l, {qkv.data, dqkv.data, dout.data, out.data, lse})) return false;
  std::lock_guard lock(impl_->mutex);
  const GraphBuilder::Plan* plan = impl_->plan_for(Direction::backward, qkv.type, l);
  if (plan == nullptr) return false;
  // The workspace: cuDNN's own, then softmax_sum and dQ in fp32, then the gradient laid out as
  // qkv.
  const i64 softmax_sum_at = round_up(plan->workspace_bytes);
  const i64 dq_accum_at = softmax_sum_at + round_up(l.b * l.h * l.t * i64{4});
  const i64 dq_accum_bytes = l.b * l.h * l.t * l.d * i64{4};
  const i64 gradient_at = dq_accum_at + round_up(dq_accum_bytes);
  const i64 gradient_elements = l.b * l.t * l.width();
  auto* workspace = static_cast<char*>(
      impl_->workspaces.get(stream, gradient_at + gradient_elements * element_bytes));
  char* gradient = workspace + gradient_at;
  float scale = scores_scale(l.d);
  float minus_infinity = -INFINITY;
  float one = 1.0f;
  auto* rows = static_cast<char*>(const_cast<void*>(qkv.data));
  const std::vector<i64> uids = {
      q_uid,   k_uid,    v_uid,  out_uid, lse_uid, scale_uid,       minus_infinity_uid,
      one_uid, dout_uid, dq_uid, dk_uid,  dv_uid,  softmax_sum_uid, dq_accum_uid};
  const std::vector<void*> pointers = {rows,
                                       rows + l.k_offset() * element_bytes,
                                       rows + l.v_offset() * element_bytes,
                                       const_cast<void*>(out.data),
                                       const_cast<float*>(lse),
                                       &scale,
                                       &minus_infinity,
                                       &one,
                                       const_cast<void*>(dout.data),
                                       gradient,
                                       gradient + l.k_offset() * element_bytes,
                                       gradient + l.v_offset() * element_bytes,
                                       workspace + softmax_sum_at,
                                       workspace + dq_accum_at};
  const int device = impl_->device.index();
  // cuDNN before 9.6 expects dQ's fp32 accumulator zeroed by its caller; later ones ignore it.
  check(cudaMemsetAsync(workspace + dq_accum_at, 0, static_cast<std::size_t>(dq_accum_bytes),
                        kernel_stream(stream, device)),
        "cudaMemsetAsync of cuDNN's dQ accumulator");
  execute_plan(impl_->handle, kernel_stream(stream, device), plan->plan, uids, pointers, workspace);
  with_element(qkv.type, [&](auto e) {
    launched(kernels::residual_forward(kernel_stream(stream, device), as(e, dqkv), as(e, dqkv),
                                       as(e, ConstTensor(gradient, qkv.type)), gradient_elements),
             "cuDNN attention gradient into dqkv");
  });
  return true;
}

}  // namespace strata::gpu::cuda
