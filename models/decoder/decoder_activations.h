#pragma once

#include <cstdint>
#include <vector>

#include "gpu/device_buffer.h"
#include "gpu/tensor.h"
#include "models/decoder/decoder_spec.h"

namespace strata::gpu {
class Device;
}

namespace strata::models {

// The buffers of one ActivationPlan, by the family's slot numbers; fp32 ones are float32
// tensors (read them with .f32()).
struct BlockBuffers {
  std::vector<gpu::Tensor> tensors;
  std::vector<std::int64_t> elements;

  gpu::Tensor operator[](std::size_t slot) const { return tensors[slot]; }
};

// All activation memory of a decoder, carved out of one device allocation as llm.c does: the
// residual stream, each block's plan (one shared set with checkpointing, refilled by recomputing
// the forward before each backward), the final norm, the logits and the loss.
class DecoderActivations {
 public:
  // Activations and their gradients are stored in `compute` (float32, bfloat16 or float16); the
  // planned fp32 buffers, the norm's statistics, the constants and the loss terms are fp32.
  DecoderActivations(gpu::Device& device, const DecoderSpec& spec, bool checkpointing,
                     gpu::DataType compute);
  static std::int64_t bytes_needed(const DecoderSpec& spec, bool checkpointing,
                                   gpu::DataType compute);

  std::int32_t* tokens = nullptr;     // (rows)
  std::int32_t* targets = nullptr;    // (rows)
  float* constants = nullptr;         // the spec's constants, on the device
  std::vector<gpu::Tensor> residual;  // n_layer + 1 streams of (rows, C): the block inputs/outputs
  std::vector<BlockBuffers> blocks;   // n_layer, or 1 shared when checkpointing
  BlockBuffers block_grads;
  gpu::Tensor dresidual[2];    // ping-pong gradients of the residual stream
  gpu::Tensor norm;            // (rows, C): the final norm's output
  float* norm_mean = nullptr;  // (rows), a layer norm's only
  float* norm_rstd = nullptr;  // (rows)
  gpu::Tensor dnorm;           // (rows, C)
  gpu::Tensor logits;          // (rows, Vp), then their gradient (models/classifier.h)
  float* losses = nullptr;     // (rows)
  float* lse = nullptr;        // (rows)
  float* dlosses = nullptr;    // (rows)
  float* loss = nullptr;       // (1)
  bool logits_hold_gradient = false;

  BlockBuffers& block(std::int64_t layer);

 private:
  DecoderActivations() = default;  // for bytes_needed, which only sizes

  gpu::DeviceBuffer storage_;
  bool checkpointing_ = false;
};

}  // namespace strata::models
