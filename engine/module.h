#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/assert.h"
#include "engine/param_spec.h"
#include "gpu/tensor.h"

namespace strata::gpu {
class Device;
class Ops;
class Stream;
}  // namespace strata::gpu

namespace strata::engine {

// Device tensors of a module's parameters (or gradients), in the order the module declared them,
// as the engine has laid them out in the module's flat buffer. Parameters are in the compute type
// (float32, or the bfloat16/float16 the config trains in); gradients are always float32. Valid for
// the duration of one forward or backward call.
class TensorViews {
 public:
  TensorViews() = default;
  explicit TensorViews(std::span<const gpu::Tensor> tensors) : tensors_(tensors) {}

  gpu::Tensor operator[](std::size_t index) const {
    STRATA_ASSERT(index < tensors_.size());
    return tensors_[index];
  }
  std::size_t size() const { return tensors_.size(); }

 private:
  std::span<const gpu::Tensor> tensors_;
};

// What a module's forward and backward run with: the device, its compute stream and ops, and the
// micro-batch being processed.
struct StepContext {
  gpu::Device& device;
  gpu::Stream& stream;
  gpu::Ops& ops;
  std::int64_t micro_batch = 0;  // index within the step (0 .. gradient_accumulation_steps - 1)
  // The gradient of the step's objective with respect to this micro-batch's mean loss:
  // loss_scale / gradient_accumulation_steps, when every target of the step is in the loss. The
  // module that computes the loss seeds its backward with it (or with row_loss_gradient).
  float loss_gradient = 1.0f;
  // True in a training step's forward, whose backward follows: the module that computes the loss
  // may then write the loss's gradient in the same pass (gpu::Ops::cross_entropy_fused), with
  // loss_gradient already set. False in an evaluation's forward.
  bool backward_follows = false;
  // Set when some target of the step is masked out of the loss (negative, gpu::Ops::
  // cross_entropy_forward): d(step objective) / d(losses[row]) for every row whose target is in
  // the loss, loss_scale x world_size / N, N the step's targets in the loss over every
  // micro-batch and rank (world_size because the gradient reducer averages over ranks); 0 when
  // N is 0. The objective is then the mean over the step's unmasked targets, not a mean of each
  // micro-batch's means. Unset when every target is in the loss: the module seeds
  // loss_gradient / rows, the bits it always had (engine/loss_tokens.h).
  std::optional<float> row_loss_gradient;
};

// One unit of the model the engine gathers, runs and releases as a whole (a transformer block,
// the embedding, the final norm and head). A module declares its parameters once; the engine
// owns their storage (flat, sharded, possibly on NVMe) and hands the module device pointers to
// fp32 copies gathered for the call. Activations that cross modules belong to the model.
class Module {
 public:
  virtual ~Module() = default;

  virtual std::string_view name() const = 0;
  // The module's own parameters, in a fixed order; called once.
  virtual std::vector<ParamSpec> parameters() const = 0;
  // Modules whose parameters this one also reads, as with a tied LM head reading the token
  // embedding: the engine gathers them too, passes them in `borrowed` in this order, and adds
  // the gradients written to `borrowed_grads` into those modules' gradients.
  virtual std::vector<int> borrowed_modules() const { return {}; }

  virtual void forward(StepContext& context, const TensorViews& params,
                       std::span<const TensorViews> borrowed) = 0;
  // Accumulates (+=) this micro-batch's gradients into `grads` (and `borrowed_grads`).
  virtual void backward(StepContext& context, const TensorViews& params,
                        std::span<const TensorViews> borrowed, const TensorViews& grads,
                        std::span<const TensorViews> borrowed_grads) = 0;
};

}  // namespace strata::engine
