#pragma once

#include <cstdint>

#include "base/assert.h"
#include "gpu/comm.h"  // DataType

namespace strata::gpu {

// A device pointer and the element type it holds: float32, bfloat16 or float16 (16-bit values
// travel as their bit patterns). It is how the ops (gpu/ops.h) take weights and activations, so
// that a model computes in the type its config names without a widened copy: the same op runs
// fp32 or 16-bit. A float* converts implicitly, as float32.
struct Tensor {
  void* data = nullptr;
  DataType type = DataType::float32;

  Tensor() = default;
  Tensor(float* values) : data(values) {}  // NOLINT(google-explicit-constructor): fp32 as before
  Tensor(void* values, DataType element) : data(values), type(element) {}

  explicit operator bool() const { return data != nullptr; }
  std::int64_t element_bytes() const { return size_bytes(type); }
  // The tensor `elements` further on (a row of a matrix, one module's slice of a buffer).
  Tensor at(std::int64_t elements) const {
    return {static_cast<std::byte*>(data) + elements * element_bytes(), type};
  }
  // The fp32 pointer, for code that only runs on fp32 data (asserted).
  float* f32() const {
    STRATA_ASSERT(type == DataType::float32 || data == nullptr);
    return static_cast<float*>(data);
  }
};

// A Tensor the op only reads. Tensor, float* and const float* convert implicitly.
struct ConstTensor {
  const void* data = nullptr;
  DataType type = DataType::float32;

  ConstTensor() = default;
  ConstTensor(const float* values) : data(values) {}  // NOLINT(google-explicit-constructor)
  ConstTensor(Tensor tensor) : data(tensor.data), type(tensor.type) {}  // NOLINT
  ConstTensor(const void* values, DataType element) : data(values), type(element) {}

  explicit operator bool() const { return data != nullptr; }
  const float* f32() const {
    STRATA_ASSERT(type == DataType::float32 || data == nullptr);
    return static_cast<const float*>(data);
  }
};

// True for the types the ops compute in: float32, bfloat16, float16.
inline bool is_compute_type(DataType type) {
  return type == DataType::float32 || type == DataType::bfloat16 || type == DataType::float16;
}

}  // namespace strata::gpu
