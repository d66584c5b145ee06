#include "models/decoder/decoder_modules.h"

#include "gpu/ops.h"
#include "gpu/stream.h"
#include "models/classifier.h"

namespace strata::models {
namespace {

using engine::ParamInit;
using engine::ParamSpec;
using engine::StepContext;
using engine::TensorViews;

// The token embedding or an untied LM head: a row per token, padded to padded_vocab rows
// (models/vocab_padding.h).
ParamSpec token_table_spec(std::string name, const DecoderSpec& s) {
  ParamSpec spec = weight_spec(std::move(name), {s.padded_vocab(), s.d_model});
  spec.unpadded_rows = s.vocab;
  return spec;
}

}  // namespace

ParamSpec weight_spec(std::string name, std::vector<std::int64_t> shape, float std_dev) {
  return {std::move(name), std::move(shape), ParamInit::normal, std_dev};
}

ParamSpec gain_spec(std::string name, std::int64_t channels) {
  return {std::move(name), {channels}, ParamInit::ones, 0};
}

ParamSpec bias_spec(std::string name, std::int64_t channels) {
  return {std::move(name), {channels}, ParamInit::zeros, 0};
}

void zero(StepContext& context, gpu::Tensor tensor, std::int64_t count) {
  context.stream.fill_zero(tensor.data, count * tensor.element_bytes());
}

std::vector<ParamSpec> DecoderEmbedding::parameters() const {
  const DecoderSpec& s = *state_.spec;
  std::vector<ParamSpec> specs = {token_table_spec(s.token_table, s)};
  if (s.position_rows > 0)
    specs.push_back(weight_spec(s.position_table, {s.position_rows, s.d_model}));
  return specs;
}

void DecoderEmbedding::forward(StepContext& context, const TensorViews& params,
                               std::span<const TensorViews> /*borrowed*/) {
  const DecoderSpec& s = *state_.spec;
  DecoderActivations& acts = **state_.acts;
  // Without learned positions, positions enter in the blocks (rotary embeddings).
  gpu::Tensor positions;
  if (s.position_rows > 0) positions = params[1];
  const ForwardPass& pass = *state_.pass;
  context.ops.embedding_forward(context.stream, acts.residual[0], acts.tokens, params[0], positions,
                                pass.start(), pass.batch, pass.tokens, s.d_model, s.vocab);
}

void DecoderEmbedding::backward(StepContext& context, const TensorViews& /*params*/,
                                std::span<const TensorViews> /*borrowed*/, const TensorViews& grads,
                                std::span<const TensorViews> /*borrowed_grads*/) {
  const DecoderSpec& s = *state_.spec;
  DecoderActivations& acts = **state_.acts;
  float* dpositions = s.position_rows > 0 ? grads[1].f32() : nullptr;
  context.ops.embedding_backward(context.stream, grads[0].f32(), dpositions, acts.dresidual[0],
                                 acts.tokens, s.batch, s.seq_len, s.d_model, s.vocab);
}

BlockIo DecoderBlock::io() const {
  DecoderActivations& acts = **state_.acts;
  const auto layer = static_cast<std::size_t>(layer_);
  return {acts.residual[layer],
          acts.residual[layer + 1],
          acts.dresidual[(layer + 1) % 2],
          acts.dresidual[layer % 2],
          acts.block(layer_),
          acts.block_grads,
          acts.constants};
}

void DecoderBlock::attention(StepContext& context, gpu::Tensor out, float* lse,
                             gpu::ConstTensor qkv, std::int64_t heads, std::int64_t kv_heads,
                             std::int64_t head_dim) const {
  const ForwardPass& p = pass();
  gpu::Ops& ops = context.ops;
  if (p.cache != nullptr) {
    ops.kv_cache_write(context.stream, p.cache->keys(layer_), p.cache->values(layer_), qkv,
                       p.cache->start(), p.batch, p.tokens, heads, kv_heads, head_dim,
                       p.cache->max_seq());
  }
  if (p.decode()) {
    ops.decode_attention(context.stream, out, qkv, p.cache->keys(layer_), p.cache->values(layer_),
                         p.cache->length(), p.cache->scratch(), p.batch, heads, kv_heads, head_dim,
                         p.cache->max_seq());
    return;
  }
  ops.attention_forward(context.stream, out, lse, qkv, p.batch, p.tokens, heads, kv_heads,
                        head_dim);
}

void DecoderBlock::forward(StepContext& context, const TensorViews& params,
                           std::span<const TensorViews> /*borrowed*/) {
  run_forward(context, params, io());
}

void DecoderBlock::backward(StepContext& context, const TensorViews& params,
                            std::span<const TensorViews> /*borrowed*/, const TensorViews& grads,
                            std::span<const TensorViews> /*borrowed_grads*/) {
  const BlockIo block = io();
  // With checkpointing the shared activations hold another block's forward: recompute ours.
  if (*state_.checkpointing) run_forward(context, params, block);
  // The backward kernels accumulate, and these buffers still hold the previous block's values.
  for (std::size_t slot = 0; slot < block.grads.tensors.size(); ++slot)
    zero(context, block.grads[slot], block.grads.elements[slot]);
  zero(context, block.dx, state_.spec->rows() * state_.spec->d_model);
  run_backward(context, params, grads, block);
}

std::size_t DecoderHead::head_slot() const {
  return state_.spec->final_norm.kind == NormKind::layer_norm ? 2 : 1;
}

std::vector<ParamSpec> DecoderHead::parameters() const {
  const DecoderSpec& s = *state_.spec;
  std::vector<ParamSpec> specs = {gain_spec(s.final_norm.name + ".weight", s.d_model)};
  if (s.final_norm.kind == NormKind::layer_norm)
    specs.push_back(bias_spec(s.final_norm.name + ".bias", s.d_model));
  if (!s.lm_head.empty()) specs.push_back(token_table_spec(s.lm_head, s));
  return specs;
}

std::vector<int> DecoderHead::borrowed_modules() const {
  if (state_.spec->lm_head.empty()) return {0};
  return {};
}

void DecoderHead::forward(StepContext& context, const TensorViews& params,
                          std::span<const TensorViews> borrowed) {
  const DecoderSpec& s = *state_.spec;
  DecoderActivations& acts = **state_.acts;
  gpu::Ops& ops = context.ops;
  const std::int64_t rows = state_.pass->rows(), c = s.d_model;
  const gpu::Tensor head = s.lm_head.empty() ? borrowed[0][0] : params[head_slot()];
  if (s.final_norm.kind == NormKind::layer_norm) {
    ops.layer_norm_forward(context.stream, acts.norm, acts.norm_mean, acts.norm_rstd,
                           acts.residual.back(), params[0], params[1], rows, c);
  } else {
    ops.rms_norm_forward(context.stream, acts.norm, acts.norm_rstd, acts.residual.back(), params[0],
                         s.final_norm.eps, rows, c);
  }
  ops.matmul_forward(context.stream, acts.logits, acts.norm, head, nullptr, rows, c,
                     s.padded_vocab());
  classify(context, acts.logits, acts.losses, acts.lse, acts.loss, acts.dlosses, acts.targets, rows,
           s.vocab, s.padded_vocab(), acts.logits_hold_gradient);
}

void DecoderHead::backward(StepContext& context, const TensorViews& params,
                           std::span<const TensorViews> borrowed, const TensorViews& grads,
                           std::span<const TensorViews> borrowed_grads) {
  const DecoderSpec& s = *state_.spec;
  DecoderActivations& acts = **state_.acts;
  gpu::Ops& ops = context.ops;
  gpu::Stream& stream = context.stream;
  const std::int64_t rows = s.rows(), c = s.d_model;
  const bool tied = s.lm_head.empty();
  const gpu::Tensor head = tied ? borrowed[0][0] : params[head_slot()];
  float* dhead = tied ? borrowed_grads[0][0].f32() : grads[head_slot()].f32();
  const gpu::Tensor dx = acts.dresidual[s.n_layer % 2];
  logits_gradient(context, acts.logits, acts.lse, acts.dlosses, acts.targets, rows, s.vocab,
                  s.padded_vocab(), acts.logits_hold_gradient);
  zero(context, acts.dnorm, rows * c);
  zero(context, dx, rows * c);
  ops.matmul_backward(stream, acts.dnorm, dhead, nullptr, acts.logits, acts.norm, head, rows, c,
                      s.padded_vocab());
  if (s.final_norm.kind == NormKind::layer_norm) {
    ops.layer_norm_backward(stream, dx, grads[0].f32(), grads[1].f32(), acts.dnorm,
                            acts.residual.back(), params[0], acts.norm_mean, acts.norm_rstd, rows,
                            c);
  } else {
    ops.rms_norm_backward(stream, dx, grads[0].f32(), acts.dnorm, acts.residual.back(), params[0],
                          acts.norm_rstd, rows, c);
  }
}

}  // namespace strata::models
