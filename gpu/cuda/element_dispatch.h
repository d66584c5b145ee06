#pragma once

#include <initializer_list>

#include "base/assert.h"
#include "gpu/comm.h"  // DataType
#include "gpu/cuda/kernels/element_types.h"
#include "gpu/tensor.h"

// From a gpu::Tensor's DataType to the element type the CUDA kernels are instantiated for
// (gpu/cuda/kernels/element_types.h): float32 is float, bfloat16 __nv_bfloat16, float16 __half.
namespace strata::gpu::cuda {

template <class T>
struct Element {
  using type = T;
};

// run(Element<T>{}) with T the element type of `type`, a compute type (asserted).
template <class Run>
decltype(auto) with_element(DataType type, Run&& run) {
  switch (type) {
    case DataType::bfloat16:
      return run(Element<__nv_bfloat16>{});
    case DataType::float16:
      return run(Element<__half>{});
    default:
      STRATA_ASSERT(type == DataType::float32 && "ops compute in float32, bfloat16 or float16");
      return run(Element<float>{});
  }
}

// The one element type of the Tensors of one call: the type of the first non-null one, every other
// non-null one asserted to match (a null Tensor, such as an absent bias, has no type).
inline DataType common_type(std::initializer_list<ConstTensor> tensors) {
  const ConstTensor* first = nullptr;
  for (const ConstTensor& tensor : tensors) {
    if (!tensor) continue;
    if (first == nullptr) first = &tensor;
    STRATA_ASSERT(tensor.type == first->type && "the Tensors of one op share one type");
  }
  return first != nullptr ? first->type : DataType::float32;
}

// The Tensor as a pointer to the element type of `element` (from with_element).
template <class T>
T* as(Element<T> /*element*/, Tensor tensor) {
  return static_cast<T*>(tensor.data);
}
template <class T>
const T* as(Element<T> /*element*/, ConstTensor tensor) {
  return static_cast<const T*>(tensor.data);
}

}  // namespace strata::gpu::cuda
