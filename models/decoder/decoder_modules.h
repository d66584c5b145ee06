#pragma once

#include <string>
#include <vector>

#include "engine/module.h"
#include "models/decoder/decoder_activations.h"
#include "models/decoder/decoder_spec.h"
#include "models/decoder/kv_cache.h"

namespace strata::models {

// What a decoder's modules share: the spec, and the activations through `acts`, which the
// decoder allocates before the first step; `checkpointing` and the forward's `pass` (the whole
// micro-batch, or a pass of generation with its KV cache) are read at each call.
struct DecoderState {
  const DecoderSpec* spec = nullptr;
  DecoderActivations* const* acts = nullptr;
  const bool* checkpointing = nullptr;
  const ForwardPass* pass = nullptr;
};

// Parameter declarations the modules share: a weight drawn from N(0, std_dev), a norm's gain
// (ones) and a bias (zeros).
engine::ParamSpec weight_spec(std::string name, std::vector<std::int64_t> shape,
                              float std_dev = 0.02f);
engine::ParamSpec gain_spec(std::string name, std::int64_t channels);
engine::ParamSpec bias_spec(std::string name, std::int64_t channels);

// Zeroes `count` elements of `tensor`: the backward kernels accumulate.
void zero(engine::StepContext& context, gpu::Tensor tensor, std::int64_t count);

// Module 0: the token embedding, and the learned positions when the spec has them.
class DecoderEmbedding final : public engine::Module {
 public:
  explicit DecoderEmbedding(DecoderState state) : state_(state) {}
  std::string_view name() const override { return "embedding"; }
  std::vector<engine::ParamSpec> parameters() const override;
  void forward(engine::StepContext& context, const engine::TensorViews& params,
               std::span<const engine::TensorViews> borrowed) override;
  void backward(engine::StepContext& context, const engine::TensorViews& params,
                std::span<const engine::TensorViews> borrowed, const engine::TensorViews& grads,
                std::span<const engine::TensorViews> borrowed_grads) override;

 private:
  DecoderState state_;
};

// What one block reads and writes: its input and output on the residual stream and their
// gradients, its planned activations (the shared set with checkpointing), the gradients of them
// (shared by every block, zeroed before its backward) and the spec's constants.
struct BlockIo {
  gpu::Tensor x, out;
  gpu::Tensor dout, dx;
  const BlockBuffers& acts;
  const BlockBuffers& grads;
  const float* constants;
};

// A family's block, modules 1..n_layer. The family writes its parameters and its math; the
// decoder wires it to the residual stream, recomputes its forward before the backward when
// checkpointing, and zeroes the shared gradients.
class DecoderBlock : public engine::Module {
 public:
  DecoderBlock(DecoderState state, std::int64_t layer, std::string name)
      : state_(state), layer_(layer), name_(std::move(name)) {}
  std::string_view name() const final { return name_; }
  void forward(engine::StepContext& context, const engine::TensorViews& params,
               std::span<const engine::TensorViews> borrowed) final;
  void backward(engine::StepContext& context, const engine::TensorViews& params,
                std::span<const engine::TensorViews> borrowed, const engine::TensorViews& grads,
                std::span<const engine::TensorViews> borrowed_grads) final;

 protected:
  virtual void run_forward(engine::StepContext& context, const engine::TensorViews& w,
                           const BlockIo& io) = 0;
  // After the forward's activations are this block's and the shared gradients are zero.
  virtual void run_backward(engine::StepContext& context, const engine::TensorViews& w,
                            const engine::TensorViews& dw, const BlockIo& io) = 0;

  // The forward's pass: its rows are pass().rows(), each sequence's tokens pass().tokens.
  const ForwardPass& pass() const { return *state_.pass; }
  // Attention over the packed qkv rows of the pass (positions already rotated) into `out`: the
  // fused attention over each sequence's own tokens, its keys and values kept in the cache
  // first when the pass has one; a decode step's token against the cache. `lse` is written by
  // the fused attention only.
  void attention(engine::StepContext& context, gpu::Tensor out, float* lse, gpu::ConstTensor qkv,
                 std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim) const;

 private:
  BlockIo io() const;

  DecoderState state_;
  std::int64_t layer_;
  std::string name_;
};

// The last module: the final norm, the LM head (its own table, or module 0's token table borrowed
// when tied) and the cross-entropy loss.
class DecoderHead final : public engine::Module {
 public:
  explicit DecoderHead(DecoderState state) : state_(state) {}
  std::string_view name() const override { return "head"; }
  std::vector<engine::ParamSpec> parameters() const override;
  std::vector<int> borrowed_modules() const override;
  void forward(engine::StepContext& context, const engine::TensorViews& params,
               std::span<const engine::TensorViews> borrowed) override;
  void backward(engine::StepContext& context, const engine::TensorViews& params,
                std::span<const engine::TensorViews> borrowed, const engine::TensorViews& grads,
                std::span<const engine::TensorViews> borrowed_grads) override;

 private:
  // Where the final norm's parameters end and the head's own table (when untied) is.
  std::size_t head_slot() const;

  DecoderState state_;
};

}  // namespace strata::models
