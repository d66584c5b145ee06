#pragma once

#include <cstdint>
#include <vector>

#include "gpu/tensor.h"

// How the host backend runs an op on 16-bit Tensors: what the op reads is widened to fp32
// (exactly), the fp32 kernel of gpu/host/kernels runs on it, and what it writes is rounded once,
// to nearest even, back into the Tensor. That is where a CUDA kernel rounds too (it loads 16 bits
// into fp32 registers and rounds its stores), so the two backends round at the same places and
// differ only in the order of their fp32 sums. fp32 Tensors pass straight through, with no copy:
// an fp32 op runs exactly as it did before Tensors had a type.
namespace strata::gpu::host {

// An input of `n` elements as fp32: the tensor's own memory when it is fp32 (or null), else a
// widened copy owned by this object.
class Fp32Input {
 public:
  Fp32Input(ConstTensor tensor, std::int64_t n);
  const float* get() const { return data_; }

 private:
  std::vector<float> copy_;
  const float* data_ = nullptr;
};

// An output of `n` elements as fp32 scratch. An output the op accumulates into (every backward
// gradient, and tensors rotated in place) starts from its current values; store() rounds the
// scratch back into the tensor. fp32 outputs are written in place and store() does nothing.
class Fp32Output {
 public:
  enum class Start { uninitialized, current_values };

  Fp32Output(Tensor tensor, std::int64_t n, Start start);
  float* get() { return data_; }
  void store();

 private:
  Tensor tensor_;
  std::int64_t n_ = 0;
  std::vector<float> scratch_;
  float* data_ = nullptr;
};

// Asserts that the non-null tensors of one op call share one compute type, and returns it.
DataType common_type(std::initializer_list<ConstTensor> tensors);

}  // namespace strata::gpu::host
