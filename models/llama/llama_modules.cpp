// The Llama family's forward and backward, as transformers' LlamaDecoderLayer computes them:
//   h = x + o_proj(attention(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))), n1 = rms(x)
//   out = h + down_proj(silu(gate_proj(n2)) * up_proj(n2)),                   n2 = rms(h)
// with n_head / n_kv_head query heads sharing each k and v head, read in place by the attention
// kernel rather than repeated (transformers' repeat_kv).
#include "models/llama/llama_modules.h"

#include "gpu/ops.h"
#include "gpu/stream.h"
#include "models/classifier.h"

namespace strata::models {
namespace {

using engine::ParamInit;
using engine::ParamSpec;
using engine::StepContext;
using engine::TensorViews;

void zero(StepContext& context, gpu::Tensor tensor, std::int64_t count) {
  context.stream.fill_zero(tensor.data, count * tensor.element_bytes());
}

ParamSpec weight(std::string name, std::vector<std::int64_t> shape) {
  return {std::move(name), std::move(shape), ParamInit::normal, 0.02f};
}

ParamSpec norm(std::string name, std::int64_t channels) {
  return {std::move(name), {channels}, ParamInit::ones, 0};
}

ParamSpec bias(std::string name, std::int64_t channels) {
  return {std::move(name), {channels}, ParamInit::zeros, 0};
}

// embed_tokens or lm_head: a row per token, padded to padded_vocab rows (models/vocab_padding.h).
ParamSpec token_table(std::string name, const LlamaShape& s) {
  ParamSpec spec = weight(std::move(name), {s.padded_vocab(), s.d_model});
  spec.unpadded_rows = s.vocab;
  return spec;
}

}  // namespace

std::vector<ParamSpec> LlamaEmbedding::parameters() const {
  const LlamaShape& s = *state_.shape;
  return {token_table("model.embed_tokens.weight", s)};
}

void LlamaEmbedding::forward(StepContext& context, const TensorViews& params,
                             std::span<const TensorViews> /*borrowed*/) {
  const LlamaShape& s = *state_.shape;
  LlamaActivations& acts = **state_.acts;
  // No position embedding: positions enter through the rotary embeddings in each block.
  context.ops.embedding_forward(context.stream, acts.residual[0], acts.tokens, params[0], nullptr,
                                s.batch, s.seq_len, s.d_model, s.vocab);
}

void LlamaEmbedding::backward(StepContext& context, const TensorViews& /*params*/,
                              std::span<const TensorViews> /*borrowed*/, const TensorViews& grads,
                              std::span<const TensorViews> /*borrowed_grads*/) {
  const LlamaShape& s = *state_.shape;
  LlamaActivations& acts = **state_.acts;
  context.ops.embedding_backward(context.stream, grads[0].f32(), nullptr, acts.dresidual[0],
                                 acts.tokens, s.batch, s.seq_len, s.d_model, s.vocab);
}

LlamaBlock::Slots LlamaBlock::slots() const {
  const bool biased = state_.shape->qkv_bias;
  Slots at{};
  std::size_t next = 0;
  at.ln1 = next++;
  at.q = next++;
  at.q_bias = biased ? next++ : 0;
  at.k = next++;
  at.k_bias = biased ? next++ : 0;
  at.v = next++;
  at.v_bias = biased ? next++ : 0;
  at.o = next++;
  at.ln2 = next++;
  at.gate = next++;
  at.up = next++;
  at.down = next++;
  return at;
}

std::vector<ParamSpec> LlamaBlock::parameters() const {
  const LlamaShape& s = *state_.shape;
  const std::int64_t c = s.d_model, q = s.n_head * s.head_dim(), kv = s.n_kv_head * s.head_dim();
  const std::string p = name_ + ".";
  std::vector<ParamSpec> specs = {norm(p + "input_layernorm.weight", c),
                                  weight(p + "self_attn.q_proj.weight", {q, c})};
  if (s.qkv_bias) specs.push_back(bias(p + "self_attn.q_proj.bias", q));
  specs.push_back(weight(p + "self_attn.k_proj.weight", {kv, c}));
  if (s.qkv_bias) specs.push_back(bias(p + "self_attn.k_proj.bias", kv));
  specs.push_back(weight(p + "self_attn.v_proj.weight", {kv, c}));
  if (s.qkv_bias) specs.push_back(bias(p + "self_attn.v_proj.bias", kv));
  specs.push_back(weight(p + "self_attn.o_proj.weight", {c, q}));
  specs.push_back(norm(p + "post_attention_layernorm.weight", c));
  specs.push_back(weight(p + "mlp.gate_proj.weight", {s.d_ff, c}));
  specs.push_back(weight(p + "mlp.up_proj.weight", {s.d_ff, c}));
  specs.push_back(weight(p + "mlp.down_proj.weight", {c, s.d_ff}));
  return specs;
}

void LlamaBlock::run_forward(StepContext& context, const TensorViews& w, LlamaBlockActivations& a) {
  const LlamaShape& s = *state_.shape;
  LlamaActivations& acts = **state_.acts;
  gpu::Ops& ops = context.ops;
  gpu::Stream& stream = context.stream;
  const Slots at = slots();
  const std::int64_t rows = s.rows(), c = s.d_model, f = s.d_ff, d = s.head_dim();
  const std::int64_t q = s.n_head * d, kv = s.n_kv_head * d;
  const bool biased = s.qkv_bias;
  const gpu::Tensor x = acts.residual[static_cast<std::size_t>(layer_)];
  const gpu::Tensor out = acts.residual[static_cast<std::size_t>(layer_ + 1)];
  ops.rms_norm_forward(stream, a.ln1, a.ln1_rstd, x, w[at.ln1], s.rms_norm_eps, rows, c);
  ops.matmul_forward(stream, a.q, a.ln1, w[at.q], biased ? w[at.q_bias] : nullptr, rows, c, q);
  ops.matmul_forward(stream, a.k, a.ln1, w[at.k], biased ? w[at.k_bias] : nullptr, rows, c, kv);
  ops.matmul_forward(stream, a.v, a.ln1, w[at.v], biased ? w[at.v_bias] : nullptr, rows, c, kv);
  ops.qkv_pack_forward(stream, a.qkv, a.q, a.k, a.v, rows, s.n_head, s.n_kv_head, d);
  // The n_head q heads and n_kv_head k heads lie side by side at the start of each packed row
  // [q | k | v]: one rotation covers both.
  ops.rope_forward(stream, a.qkv, acts.inv_freq, s.batch, s.seq_len, s.n_head + s.n_kv_head, d,
                   q + 2 * kv);
  ops.attention_forward(stream, a.atty, a.lse, a.qkv, s.batch, s.seq_len, s.n_head, s.n_kv_head, d);
  ops.matmul_forward(stream, a.attproj, a.atty, w[at.o], nullptr, rows, q, c);
  ops.residual_rms_norm_forward(stream, a.residual2, a.ln2, a.ln2_rstd, x, a.attproj, w[at.ln2],
                                s.rms_norm_eps, rows, c);
  ops.matmul_forward(stream, a.gate, a.ln2, w[at.gate], nullptr, rows, c, f);
  ops.matmul_forward(stream, a.up, a.ln2, w[at.up], nullptr, rows, c, f);
  ops.swiglu_forward(stream, a.act, a.gate, a.up, rows * f);
  ops.matmul_forward(stream, a.mlp, a.act, w[at.down], nullptr, rows, f, c);
  ops.residual_forward(stream, out, a.residual2, a.mlp, rows * c);
}

void LlamaBlock::forward(StepContext& context, const TensorViews& params,
                         std::span<const TensorViews> /*borrowed*/) {
  run_forward(context, params, (*state_.acts)->block(layer_));
}

void LlamaBlock::backward(StepContext& context, const TensorViews& w,
                          std::span<const TensorViews> /*borrowed*/, const TensorViews& dw,
                          std::span<const TensorViews> /*borrowed_grads*/) {
  const LlamaShape& s = *state_.shape;
  LlamaActivations& acts = **state_.acts;
  LlamaBlockActivations& a = acts.block(layer_);
  // With checkpointing the shared activations hold another block's forward: recompute ours.
  if (*state_.checkpointing) run_forward(context, w, a);

  gpu::Ops& ops = context.ops;
  gpu::Stream& stream = context.stream;
  LlamaBlockGradients& g = acts.block_grads;
  const Slots at = slots();
  const std::int64_t rows = s.rows(), c = s.d_model, f = s.d_ff, d = s.head_dim();
  const std::int64_t q = s.n_head * d, kv = s.n_kv_head * d;
  const bool biased = s.qkv_bias;
  const gpu::Tensor x = acts.residual[static_cast<std::size_t>(layer_)];
  const gpu::Tensor dout = acts.dresidual[(layer_ + 1) % 2];
  const gpu::Tensor dx = acts.dresidual[layer_ % 2];
  // The backward kernels accumulate, and these buffers still hold the previous block's values.
  for (gpu::Tensor buffer : {g.dln1, g.dattproj, g.dresidual2, g.dln2, g.dmlp, dx})
    zero(context, buffer, rows * c);
  for (gpu::Tensor buffer : {g.dq, g.datty})
    zero(context, buffer, rows * q);
  zero(context, g.dk, rows * kv);
  zero(context, g.dv, rows * kv);
  zero(context, g.dqkv, rows * (q + 2 * kv));
  for (gpu::Tensor buffer : {g.dgate, g.dup, g.dact})
    zero(context, buffer, rows * f);

  ops.residual_backward(stream, g.dresidual2, g.dmlp, dout, rows * c);
  ops.matmul_backward(stream, g.dact, dw[at.down].f32(), nullptr, g.dmlp, a.act, w[at.down], rows,
                      f, c);
  ops.swiglu_backward(stream, g.dgate, g.dup, g.dact, a.gate, a.up, rows * f);
  ops.matmul_backward(stream, g.dln2, dw[at.up].f32(), nullptr, g.dup, a.ln2, w[at.up], rows, c, f);
  ops.matmul_backward(stream, g.dln2, dw[at.gate].f32(), nullptr, g.dgate, a.ln2, w[at.gate], rows,
                      c, f);
  ops.rms_norm_backward(stream, g.dresidual2, dw[at.ln2].f32(), g.dln2, a.residual2, w[at.ln2],
                        a.ln2_rstd, rows, c);
  ops.residual_backward(stream, dx, g.dattproj, g.dresidual2, rows * c);
  ops.matmul_backward(stream, g.datty, dw[at.o].f32(), nullptr, g.dattproj, a.atty, w[at.o], rows,
                      q, c);
  ops.attention_backward(stream, g.dqkv, g.datty, a.qkv, a.atty, a.lse, s.batch, s.seq_len,
                         s.n_head, s.n_kv_head, d);
  ops.rope_backward(stream, g.dqkv, acts.inv_freq, s.batch, s.seq_len, s.n_head + s.n_kv_head, d,
                    q + 2 * kv);
  ops.qkv_pack_backward(stream, g.dq, g.dk, g.dv, g.dqkv, rows, s.n_head, s.n_kv_head, d);
  ops.matmul_backward(stream, g.dln1, dw[at.q].f32(), biased ? dw[at.q_bias].f32() : nullptr, g.dq,
                      a.ln1, w[at.q], rows, c, q);
  ops.matmul_backward(stream, g.dln1, dw[at.k].f32(), biased ? dw[at.k_bias].f32() : nullptr, g.dk,
                      a.ln1, w[at.k], rows, c, kv);
  ops.matmul_backward(stream, g.dln1, dw[at.v].f32(), biased ? dw[at.v_bias].f32() : nullptr, g.dv,
                      a.ln1, w[at.v], rows, c, kv);
  ops.rms_norm_backward(stream, dx, dw[at.ln1].f32(), g.dln1, x, w[at.ln1], a.ln1_rstd, rows, c);
}

std::vector<ParamSpec> LlamaHead::parameters() const {
  const LlamaShape& s = *state_.shape;
  std::vector<ParamSpec> specs = {norm("model.norm.weight", s.d_model)};
  if (!s.tied_head) specs.push_back(token_table("lm_head.weight", s));
  return specs;
}

std::vector<int> LlamaHead::borrowed_modules() const {
  if (state_.shape->tied_head) return {0};
  return {};
}

void LlamaHead::forward(StepContext& context, const TensorViews& params,
                        std::span<const TensorViews> borrowed) {
  const LlamaShape& s = *state_.shape;
  LlamaActivations& acts = **state_.acts;
  gpu::Ops& ops = context.ops;
  const std::int64_t rows = s.rows(), c = s.d_model;
  const gpu::Tensor head = s.tied_head ? borrowed[0][0] : params[1];
  ops.rms_norm_forward(context.stream, acts.norm, acts.norm_rstd, acts.residual.back(), params[0],
                       s.rms_norm_eps, rows, c);
  ops.matmul_forward(context.stream, acts.logits, acts.norm, head, nullptr, rows, c,
                     s.padded_vocab());
  classify(context, acts.logits, acts.losses, acts.lse, acts.loss, acts.dlosses, acts.targets, rows,
           s.vocab, s.padded_vocab(), acts.logits_hold_gradient);
}

void LlamaHead::backward(StepContext& context, const TensorViews& params,
                         std::span<const TensorViews> borrowed, const TensorViews& grads,
                         std::span<const TensorViews> borrowed_grads) {
  const LlamaShape& s = *state_.shape;
  LlamaActivations& acts = **state_.acts;
  gpu::Ops& ops = context.ops;
  gpu::Stream& stream = context.stream;
  const std::int64_t rows = s.rows(), c = s.d_model;
  const gpu::Tensor head = s.tied_head ? borrowed[0][0] : params[1];
  float* dhead = s.tied_head ? borrowed_grads[0][0].f32() : grads[1].f32();
  const gpu::Tensor dx = acts.dresidual[s.n_layer % 2];
  logits_gradient(context, acts.logits, acts.lse, acts.dlosses, acts.targets, rows, s.vocab,
                  s.padded_vocab(), acts.logits_hold_gradient);
  zero(context, acts.dnorm, rows * c);
  zero(context, dx, rows * c);
  ops.matmul_backward(stream, acts.dnorm, dhead, nullptr, acts.logits, acts.norm, head, rows, c,
                      s.padded_vocab());
  ops.rms_norm_backward(stream, dx, grads[0].f32(), acts.dnorm, acts.residual.back(), params[0],
                        acts.norm_rstd, rows, c);
}

}  // namespace strata::models
