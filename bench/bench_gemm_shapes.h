#pragma once

// The linear layers `strata bench gemm` measures: a model's, from its plan, or one product given
// by its m, n and k.

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_plan.h"

namespace strata::tools {

// One linear layer: out[rows, out] = inp[rows, in] @ weight[out, in]^T (+ bias), run `count`
// times per micro-batch (once per block, or once for the head).
struct GemmLayer {
  std::string name;
  std::int64_t rows = 0;
  std::int64_t in = 0;
  std::int64_t out = 0;
  std::int64_t count = 1;
  bool bias = true;
  // The engine runs this layer's forward with its GELU as one op (matmul_gelu_forward): the GPT's
  // MLP up-projection.
  bool gelu = false;

  double forward_flops() const { return 2.0 * static_cast<double>(rows * in * out); }
  double backward_flops() const { return 2 * forward_flops(); }  // dinp and dweight
  // At least 8192 x 4096 x 2048 multiply-adds: every product of the 1.3B GPT but its 2048 x 2048
  // attention projection. On a GPU these run long enough that the tensor cores bound them, not
  // the launch or the last partial wave of tiles, which is where a rate target applies.
  bool large() const { return rows * in * out >= std::int64_t{8192} * 4096 * 2048; }
};

// The model's linear layers: the GPT's (qkv, attention projection, MLP up and down, the head), or
// the Llama family's (q/k/v/o, gate/up/down, the head).
std::vector<GemmLayer> model_gemm_layers(const models::ModelPlan& plan);

}  // namespace strata::tools
