#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/tensor.h"

namespace strata::models {

// Hands out consecutive pieces of one activation allocation, each 64-byte aligned, as llm.c
// carves its tensors. With `base` null it only counts, so that sizing and carving can never
// disagree: a model sizes with a null base, allocates bytes(), then carves the same way.
class ActivationCarver {
 public:
  explicit ActivationCarver(std::byte* base) : base_(base) {}

  template <class T>
  T* take(std::int64_t count) {
    std::int64_t at = offset_;
    offset_ += (count * static_cast<std::int64_t>(sizeof(T)) + 63) / 64 * 64;
    return base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + at);
  }
  // `count` elements of `type` (an activation in the model's compute type).
  gpu::Tensor take(gpu::DataType type, std::int64_t count) {
    std::int64_t at = offset_;
    offset_ += (count * gpu::size_bytes(type) + 63) / 64 * 64;
    return {base_ == nullptr ? nullptr : static_cast<void*>(base_ + at), type};
  }
  std::int64_t bytes() const { return offset_; }

 private:
  std::byte* base_;
  std::int64_t offset_ = 0;
};

}  // namespace strata::models
