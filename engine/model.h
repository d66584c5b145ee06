#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/module.h"

namespace strata::gpu {
class Device;
class Stream;
}  // namespace strata::gpu

namespace strata::engine {

// Values a model brings for its parameters (a pretrained checkpoint's), in place of the ones
// strata.seed makes. Read range by range as the engine fills each tier, so the whole model is
// never in memory at once.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Elements [first_element, first_element + out.size()) of tensor `tensor_index` (its position
  // in declaration order across all modules), flattened row-major as the module declared it.
  virtual void read(std::size_t tensor_index, std::int64_t first_element,
                    std::span<float> out) const = 0;
};

// A model as the engine sees it: an ordered list of modules (run forward in this order, backward
// in reverse) plus the activation memory that flows between them, which the model owns.
struct Config;

// The type a model computes in and stores its activations in, as the config says: bfloat16 or
// float16 when that section is enabled (the parameters' storage type too), else float32.
gpu::DataType compute_type(const Config& config);

class Model {
 public:
  virtual ~Model() = default;

  virtual std::span<Module* const> modules() = 0;

  // Allocates activation memory on `device` for one micro-batch, the activations stored in
  // `compute`, the type the model computes in (float32, or the bfloat16/float16 its parameters
  // are stored in). With checkpointing, each module keeps only its input and recomputes the rest
  // in backward (the losses are identical).
  virtual void allocate_activations(gpu::Device& device, bool activation_checkpointing,
                                    gpu::DataType compute) = 0;
  // Activation bytes that allocate_activations takes, for the memory estimate.
  virtual std::int64_t activation_bytes(bool activation_checkpointing,
                                        gpu::DataType compute) const = 0;

  // Copies one micro-batch of inputs and targets (host memory, tokens_per_micro_batch() each)
  // to the device on `stream`. The host spans must stay valid until the copy has run.
  virtual void load_batch(gpu::Stream& stream, std::span<const std::int32_t> inputs,
                          std::span<const std::int32_t> targets) = 0;
  // Device pointer to the mean loss of the last forward (one float).
  virtual const float* loss() const = 0;
  // The last forward's logits at token `row` of the micro-batch (row < tokens_per_micro_batch()):
  // vocab() values in the compute type, in device memory the next forward or backward rewrites.
  virtual gpu::ConstTensor logits_at(std::int64_t row) const = 0;
  // The tokens the logits score (the real ones, not the columns padded for the kernels).
  virtual std::int64_t vocab() const = 0;

  virtual std::int64_t tokens_per_micro_batch() const = 0;
  // Training FLOPs per token (forward + backward), for throughput and MFU.
  virtual double flops_per_token() const = 0;

  // Generation with a KV cache (models/generate/). cache_bytes: what a cache of `max_seq`
  // positions for each sequence of the micro-batch takes on the device; allocate_cache makes it
  // (zeroed on `stream`), replacing any earlier one.
  virtual std::int64_t cache_bytes(std::int64_t max_seq, gpu::DataType compute) const = 0;
  virtual void allocate_cache(gpu::Device& device, gpu::Stream& stream, std::int64_t max_seq,
                              gpu::DataType compute) = 0;
  // Makes the next forward a pass of generation: `tokens` new tokens of each sequence of the
  // micro-batch (`inputs`: batch x tokens ids, sequence by sequence) at positions start[b],
  // start[b] + 1, ..., their keys and values kept in the cache. One token per sequence attends
  // over the cache (a decode step); more run from position 0 through the fused attention (a
  // prefill). The next load_batch makes forwards whole micro-batches again. The host spans must
  // stay valid until the copies have run.
  virtual void load_cached(gpu::Stream& stream, std::span<const std::int32_t> inputs,
                           std::int64_t tokens, std::span<const std::int32_t> start) = 0;

  // The parameters' starting values when the model brings its own; nullptr: the seed's
  // (engine/param_init.h). A checkpoint loaded afterwards replaces either.
  virtual const WeightSource* pretrained_weights() const { return nullptr; }
};

}  // namespace strata::engine
