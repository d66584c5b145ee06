#pragma once

#include <cstdint>
#include <vector>

#include "gpu/device_buffer.h"
#include "gpu/tensor.h"
#include "models/gpt/gpt_shape.h"

namespace strata::gpu {
class Device;
}

namespace strata::models {

// What one transformer block computes in forward and reads again in backward (llm.c's
// ActivationTensors, per layer). Without checkpointing each block has its own; with it, all
// blocks share one set, refilled by recomputing the forward before each backward.
struct BlockActivations {
  gpu::Tensor ln1;            // (rows, C)
  float* ln1_mean = nullptr;  // (rows)
  float* ln1_rstd = nullptr;  // (rows)
  gpu::Tensor qkv;            // (rows, 3C)
  gpu::Tensor atty;           // (rows, C)
  float* lse = nullptr;       // (batch, heads, T): attention's log-sum-exp per query row
  gpu::Tensor attproj;        // (rows, C)
  gpu::Tensor residual2;      // (rows, C)
  gpu::Tensor ln2;            // (rows, C)
  float* ln2_mean = nullptr;  // (rows)
  float* ln2_rstd = nullptr;  // (rows)
  gpu::Tensor fch;            // (rows, 4C)
  gpu::Tensor fch_gelu;       // (rows, 4C)
  gpu::Tensor fcproj;         // (rows, C)
};

// Gradients of a block's internal activations: one set shared by every block, zeroed at the
// start of each block's backward (the backward kernels accumulate).
struct BlockGradients {
  gpu::Tensor dln1;
  gpu::Tensor dqkv;
  gpu::Tensor datty;
  gpu::Tensor dattproj;
  gpu::Tensor dresidual2;
  gpu::Tensor dln2;
  gpu::Tensor dfch;
  gpu::Tensor dfch_gelu;
  gpu::Tensor dfcproj;
};

// All activation memory of a GPT, carved out of one device allocation as llm.c does.
class GptActivations {
 public:
  // Activations and their gradients are stored in `compute` (float32, bfloat16 or float16); the
  // norms' statistics and the loss terms are fp32 whatever it is.
  GptActivations(gpu::Device& device, const GptShape& shape, bool checkpointing,
                 gpu::DataType compute);
  static std::int64_t bytes_needed(const GptShape& shape, bool checkpointing,
                                   gpu::DataType compute);

  std::int32_t* tokens = nullptr;     // (rows)
  std::int32_t* targets = nullptr;    // (rows)
  std::vector<gpu::Tensor> residual;  // n_layer + 1 streams of (rows, C): the block inputs/outputs
  std::vector<BlockActivations> blocks;  // n_layer, or 1 shared when checkpointing
  BlockGradients block_grads;
  gpu::Tensor dresidual[2];   // ping-pong gradients of the residual stream
  gpu::Tensor lnf;            // (rows, C)
  float* lnf_mean = nullptr;  // (rows)
  float* lnf_rstd = nullptr;  // (rows)
  gpu::Tensor dlnf;           // (rows, C)
  gpu::Tensor logits;         // (rows, Vp), then their gradient (models/classifier.h)
  float* losses = nullptr;    // (rows)
  float* lse = nullptr;       // (rows)
  float* dlosses = nullptr;   // (rows)
  float* loss = nullptr;      // (1)
  bool logits_hold_gradient = false;

  BlockActivations& block(std::int64_t layer);

 private:
  GptActivations() = default;  // for bytes_needed, which only sizes

  gpu::DeviceBuffer storage_;
  bool checkpointing_ = false;
};

}  // namespace strata::models
