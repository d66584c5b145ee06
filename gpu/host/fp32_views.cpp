#include "gpu/host/fp32_views.h"

#include "base/assert.h"
#include "gpu/host/kernels/cast.h"

namespace strata::gpu::host {
namespace {

namespace k = kernels;

void widen(float* target, const void* source, DataType type, std::int64_t n) {
  const auto* half = static_cast<const std::uint16_t*>(source);
  switch (type) {
    case DataType::bfloat16:
      k::cast_bf16_to_fp32(target, half, n);
      return;
    case DataType::float16:
      k::cast_fp16_to_fp32(target, half, n);
      return;
    default:
      STRATA_ASSERT(false && "only 16-bit tensors are widened");
  }
}

}  // namespace

Fp32Input::Fp32Input(ConstTensor tensor, std::int64_t n) {
  STRATA_ASSERT(n >= 0 && is_compute_type(tensor.type));
  if (tensor.data == nullptr || tensor.type == DataType::float32) {
    data_ = static_cast<const float*>(tensor.data);
    return;
  }
  copy_.resize(static_cast<std::size_t>(n));
  widen(copy_.data(), tensor.data, tensor.type, n);
  data_ = copy_.data();
}

Fp32Output::Fp32Output(Tensor tensor, std::int64_t n, Start start) : tensor_(tensor), n_(n) {
  STRATA_ASSERT(n >= 0 && is_compute_type(tensor.type));
  if (tensor.data == nullptr || tensor.type == DataType::float32) {
    data_ = static_cast<float*>(tensor.data);
    return;
  }
  scratch_.resize(static_cast<std::size_t>(n));
  if (start == Start::current_values) widen(scratch_.data(), tensor.data, tensor.type, n);
  data_ = scratch_.data();
}

void Fp32Output::store() {
  if (scratch_.empty()) return;
  auto* half = static_cast<std::uint16_t*>(tensor_.data);
  if (tensor_.type == DataType::bfloat16) {
    k::cast_fp32_to_bf16(half, scratch_.data(), n_);
  } else {
    k::cast_fp32_to_fp16(half, scratch_.data(), n_);
  }
}

DataType common_type(std::initializer_list<ConstTensor> tensors) {
  DataType type = DataType::float32;
  bool seen = false;
  for (const ConstTensor& tensor : tensors) {
    if (tensor.data == nullptr) continue;
    STRATA_ASSERT(is_compute_type(tensor.type));
    STRATA_ASSERT((!seen || tensor.type == type) && "one op call computes in one type");
    type = tensor.type;
    seen = true;
  }
  return type;
}

}  // namespace strata::gpu::host
