#pragma once

#include <cstdint>
#include <vector>

#include "gpu/device_buffer.h"
#include "models/gpt/gpt_shape.h"

namespace strata::gpu {
class Device;
}

namespace strata::models {

// What one transformer block computes in forward and reads again in backward (llm.c's
// ActivationTensors, per layer). Without checkpointing each block has its own; with it, all
// blocks share one set, refilled by recomputing the forward before each backward.
struct BlockActivations {
  float* ln1 = nullptr;        // (rows, C)
  float* ln1_mean = nullptr;   // (rows)
  float* ln1_rstd = nullptr;   // (rows)
  float* qkv = nullptr;        // (rows, 3C)
  float* atty = nullptr;       // (rows, C)
  float* att = nullptr;        // (batch, heads, T, T)
  float* attproj = nullptr;    // (rows, C)
  float* residual2 = nullptr;  // (rows, C)
  float* ln2 = nullptr;        // (rows, C)
  float* ln2_mean = nullptr;   // (rows)
  float* ln2_rstd = nullptr;   // (rows)
  float* fch = nullptr;        // (rows, 4C)
  float* fch_gelu = nullptr;   // (rows, 4C)
  float* fcproj = nullptr;     // (rows, C)
};

// Gradients of a block's internal activations: one set shared by every block, zeroed at the
// start of each block's backward (the backward kernels accumulate).
struct BlockGradients {
  float* dln1 = nullptr;
  float* dqkv = nullptr;
  float* datty = nullptr;
  float* dattproj = nullptr;
  float* dresidual2 = nullptr;
  float* dln2 = nullptr;
  float* dfch = nullptr;
  float* dfch_gelu = nullptr;
  float* dfcproj = nullptr;
};

// All activation memory of a GPT, carved out of one device allocation as llm.c does.
class GptActivations {
 public:
  GptActivations(gpu::Device& device, const GptShape& shape, bool checkpointing);
  static std::int64_t bytes_needed(const GptShape& shape, bool checkpointing);

  std::int32_t* tokens = nullptr;   // (rows)
  std::int32_t* targets = nullptr;  // (rows)
  std::vector<float*> residual;     // n_layer + 1 streams of (rows, C): the block inputs/outputs
  std::vector<BlockActivations> blocks;  // n_layer, or 1 shared when checkpointing
  BlockGradients block_grads;
  float* dresidual[2] = {nullptr, nullptr};  // ping-pong gradients of the residual stream
  float* lnf = nullptr;                      // (rows, C)
  float* lnf_mean = nullptr;                 // (rows)
  float* lnf_rstd = nullptr;                 // (rows)
  float* dlnf = nullptr;                     // (rows, C)
  float* logits = nullptr;                   // (rows, V)
  float* dlogits = nullptr;                  // (rows, V)
  float* losses = nullptr;                   // (rows)
  float* lse = nullptr;                      // (rows)
  float* dlosses = nullptr;                  // (rows)
  float* loss = nullptr;                     // (1)

  BlockActivations& block(std::int64_t layer);

 private:
  GptActivations() = default;  // for bytes_needed, which only sizes

  gpu::DeviceBuffer storage_;
  bool checkpointing_ = false;
};

}  // namespace strata::models
