#pragma once

#include <cstdint>
#include <vector>

#include "gpu/device_buffer.h"
#include "models/llama/llama_shape.h"

namespace strata::gpu {
class Device;
}

namespace strata::models {

// What one Llama block computes in forward and reads again in backward. Without checkpointing
// each block has its own; with it, all blocks share one set, refilled by recomputing.
struct LlamaBlockActivations {
  float* ln1 = nullptr;        // (rows, C)
  float* ln1_rstd = nullptr;   // (rows)
  float* q = nullptr;          // (rows, H x D)
  float* k = nullptr;          // (rows, Hkv x D)
  float* v = nullptr;          // (rows, Hkv x D)
  float* qkv = nullptr;        // (rows, 3 x H x D): packed, k and v repeated, q and k rotated
  float* att = nullptr;        // (batch, H, T, T)
  float* atty = nullptr;       // (rows, H x D)
  float* attproj = nullptr;    // (rows, C)
  float* residual2 = nullptr;  // (rows, C)
  float* ln2 = nullptr;        // (rows, C)
  float* ln2_rstd = nullptr;   // (rows)
  float* gate = nullptr;       // (rows, F)
  float* up = nullptr;         // (rows, F)
  float* act = nullptr;        // (rows, F): silu(gate) * up
  float* mlp = nullptr;        // (rows, C)
};

// Gradients of a block's internal activations, one set shared by every block.
struct LlamaBlockGradients {
  float* dln1 = nullptr;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
  float* dqkv = nullptr;
  float* datty = nullptr;
  float* dattproj = nullptr;
  float* dresidual2 = nullptr;
  float* dln2 = nullptr;
  float* dgate = nullptr;
  float* dup = nullptr;
  float* dact = nullptr;
  float* dmlp = nullptr;
};

// All activation memory of a Llama, carved out of one device allocation.
class LlamaActivations {
 public:
  LlamaActivations(gpu::Device& device, const LlamaShape& shape, bool checkpointing);
  static std::int64_t bytes_needed(const LlamaShape& shape, bool checkpointing);

  std::int32_t* tokens = nullptr;   // (rows)
  std::int32_t* targets = nullptr;  // (rows)
  float* inv_freq = nullptr;        // (head_dim / 2), the rotary frequencies on the device
  std::vector<float*> residual;     // n_layer + 1 streams of (rows, C)
  std::vector<LlamaBlockActivations> blocks;  // n_layer, or 1 shared when checkpointing
  LlamaBlockGradients block_grads;
  float* dresidual[2] = {nullptr, nullptr};
  float* norm = nullptr;       // (rows, C): the final RMSNorm
  float* norm_rstd = nullptr;  // (rows)
  float* dnorm = nullptr;      // (rows, C)
  float* logits = nullptr;     // (rows, V)
  float* dlogits = nullptr;    // (rows, V)
  float* losses = nullptr;     // (rows)
  float* lse = nullptr;        // (rows)
  float* dlosses = nullptr;    // (rows)
  float* loss = nullptr;       // (1)

  LlamaBlockActivations& block(std::int64_t layer);

 private:
  LlamaActivations() = default;  // for bytes_needed, which only sizes

  gpu::DeviceBuffer storage_;
  bool checkpointing_ = false;
};

}  // namespace strata::models
