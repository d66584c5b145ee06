#pragma once

#include <cstdint>
#include <span>

#include "engine/module.h"

namespace strata::gpu {
class Device;
class Stream;
}  // namespace strata::gpu

namespace strata::engine {

// A model as the engine sees it: an ordered list of modules (run forward in this order, backward
// in reverse) plus the activation memory that flows between them, which the model owns.
class Model {
 public:
  virtual ~Model() = default;

  virtual std::span<Module* const> modules() = 0;

  // Allocates activation memory on `device` for one micro-batch. With checkpointing, each
  // module keeps only its input and recomputes the rest in backward (the losses are identical).
  virtual void allocate_activations(gpu::Device& device, bool activation_checkpointing) = 0;
  // Activation bytes that allocate_activations takes, for the memory estimate.
  virtual std::int64_t activation_bytes(bool activation_checkpointing) const = 0;

  // Copies one micro-batch of inputs and targets (host memory, tokens_per_micro_batch() each)
  // to the device on `stream`. The host spans must stay valid until the copy has run.
  virtual void load_batch(gpu::Stream& stream, std::span<const std::int32_t> inputs,
                          std::span<const std::int32_t> targets) = 0;
  // Device pointer to the mean loss of the last forward (one float).
  virtual const float* loss() const = 0;

  virtual std::int64_t tokens_per_micro_batch() const = 0;
  // Training FLOPs per token (forward + backward), for throughput and MFU.
  virtual double flops_per_token() const = 0;
};

}  // namespace strata::engine
