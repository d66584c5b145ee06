#pragma once

#include <cstdint>
#include <vector>

#include "gpu/device_buffer.h"
#include "gpu/tensor.h"
#include "models/llama/llama_shape.h"

namespace strata::gpu {
class Device;
}

namespace strata::models {

// What one Llama block computes in forward and reads again in backward. Without checkpointing
// each block has its own; with it, all blocks share one set, refilled by recomputing.
struct LlamaBlockActivations {
  gpu::Tensor ln1;            // (rows, C)
  float* ln1_rstd = nullptr;  // (rows)
  gpu::Tensor q;              // (rows, H x D)
  gpu::Tensor k;              // (rows, Hkv x D)
  gpu::Tensor v;              // (rows, Hkv x D)
  gpu::Tensor qkv;            // (rows, (H + 2 Hkv) x D): [q | k | v], q and k rotated
  float* lse = nullptr;       // (batch, H, T): attention's log-sum-exp per query row
  gpu::Tensor atty;           // (rows, H x D)
  gpu::Tensor attproj;        // (rows, C)
  gpu::Tensor residual2;      // (rows, C)
  gpu::Tensor ln2;            // (rows, C)
  float* ln2_rstd = nullptr;  // (rows)
  gpu::Tensor gate;           // (rows, F)
  gpu::Tensor up;             // (rows, F)
  gpu::Tensor act;            // (rows, F): silu(gate) * up
  gpu::Tensor mlp;            // (rows, C)
};

// Gradients of a block's internal activations, one set shared by every block.
struct LlamaBlockGradients {
  gpu::Tensor dln1;
  gpu::Tensor dq;
  gpu::Tensor dk;
  gpu::Tensor dv;
  gpu::Tensor dqkv;
  gpu::Tensor datty;
  gpu::Tensor dattproj;
  gpu::Tensor dresidual2;
  gpu::Tensor dln2;
  gpu::Tensor dgate;
  gpu::Tensor dup;
  gpu::Tensor dact;
  gpu::Tensor dmlp;
};

// All activation memory of a Llama, carved out of one device allocation.
class LlamaActivations {
 public:
  // Activations and their gradients are stored in `compute` (float32, bfloat16 or float16); the
  // norms' statistics, the rotary frequencies and the loss terms are fp32 whatever it is.
  LlamaActivations(gpu::Device& device, const LlamaShape& shape, bool checkpointing,
                   gpu::DataType compute);
  static std::int64_t bytes_needed(const LlamaShape& shape, bool checkpointing,
                                   gpu::DataType compute);

  std::int32_t* tokens = nullptr;     // (rows)
  std::int32_t* targets = nullptr;    // (rows)
  float* inv_freq = nullptr;          // (head_dim / 2), the rotary frequencies on the device
  std::vector<gpu::Tensor> residual;  // n_layer + 1 streams of (rows, C)
  std::vector<LlamaBlockActivations> blocks;  // n_layer, or 1 shared when checkpointing
  LlamaBlockGradients block_grads;
  gpu::Tensor dresidual[2];
  gpu::Tensor norm;            // (rows, C): the final RMSNorm
  float* norm_rstd = nullptr;  // (rows)
  gpu::Tensor dnorm;           // (rows, C)
  gpu::Tensor logits;          // (rows, Vp), then their gradient (models/classifier.h)
  float* losses = nullptr;     // (rows)
  float* lse = nullptr;        // (rows)
  float* dlosses = nullptr;    // (rows)
  float* loss = nullptr;       // (1)
  bool logits_hold_gradient = false;

  LlamaBlockActivations& block(std::int64_t layer);

 private:
  LlamaActivations() = default;  // for bytes_needed, which only sizes

  gpu::DeviceBuffer storage_;
  bool checkpointing_ = false;
};

}  // namespace strata::models
