#include "models/gpt/gpt_modules.h"

#include <cmath>

#include "gpu/ops.h"
#include "gpu/stream.h"
#include "models/classifier.h"

namespace strata::models {
namespace {

using engine::ParamInit;
using engine::ParamSpec;
using engine::StepContext;
using engine::TensorViews;

// Indices into a block's parameters, in declaration order.
enum BlockParam : std::size_t {
  ln1_w,
  ln1_b,
  qkv_w,
  qkv_b,
  proj_w,
  proj_b,
  ln2_w,
  ln2_b,
  fc_w,
  fc_b,
  fcproj_w,
  fcproj_b
};

void zero(StepContext& context, gpu::Tensor tensor, std::int64_t count) {
  context.stream.fill_zero(tensor.data, count * tensor.element_bytes());
}

ParamSpec weight(std::string name, std::vector<std::int64_t> shape, float std_dev) {
  return {std::move(name), std::move(shape), ParamInit::normal, std_dev};
}

ParamSpec gain(std::string name, std::int64_t channels) {
  return {std::move(name), {channels}, ParamInit::ones, 0};
}

ParamSpec bias(std::string name, std::int64_t channels) {
  return {std::move(name), {channels}, ParamInit::zeros, 0};
}

}  // namespace

std::vector<ParamSpec> GptEmbedding::parameters() const {
  const GptShape& s = *state_.shape;
  ParamSpec wte = weight("wte", {s.padded_vocab(), s.d_model}, 0.02f);
  wte.unpadded_rows = s.vocab;
  return {std::move(wte), weight("wpe", {s.position_rows(), s.d_model}, 0.02f)};
}

void GptEmbedding::forward(StepContext& context, const TensorViews& params,
                           std::span<const TensorViews> /*borrowed*/) {
  const GptShape& s = *state_.shape;
  GptActivations& acts = **state_.acts;
  context.ops.embedding_forward(context.stream, acts.residual[0], acts.tokens, params[0], params[1],
                                s.batch, s.seq_len, s.d_model, s.vocab);
}

void GptEmbedding::backward(StepContext& context, const TensorViews& /*params*/,
                            std::span<const TensorViews> /*borrowed*/, const TensorViews& grads,
                            std::span<const TensorViews> /*borrowed_grads*/) {
  const GptShape& s = *state_.shape;
  GptActivations& acts = **state_.acts;
  context.ops.embedding_backward(context.stream, grads[0].f32(), grads[1].f32(), acts.dresidual[0],
                                 acts.tokens, s.batch, s.seq_len, s.d_model, s.vocab);
}

std::vector<ParamSpec> GptBlock::parameters() const {
  const GptShape& s = *state_.shape;
  std::int64_t c = s.d_model;
  // GPT-2 scales the init of the projections that write into the residual stream by
  // 1/sqrt(2 * n_layer), so the stream's variance does not grow with depth.
  float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(s.n_layer));
  std::string p = name_ + ".";
  return {gain(p + "ln1.weight", c),
          bias(p + "ln1.bias", c),
          weight(p + "attn.qkv.weight", {3 * c, c}, 0.02f),
          bias(p + "attn.qkv.bias", 3 * c),
          weight(p + "attn.proj.weight", {c, c}, residual_std),
          bias(p + "attn.proj.bias", c),
          gain(p + "ln2.weight", c),
          bias(p + "ln2.bias", c),
          weight(p + "mlp.fc.weight", {4 * c, c}, 0.02f),
          bias(p + "mlp.fc.bias", 4 * c),
          weight(p + "mlp.proj.weight", {c, 4 * c}, residual_std),
          bias(p + "mlp.proj.bias", c)};
}

void GptBlock::run_forward(StepContext& context, const TensorViews& w, BlockActivations& a) {
  const GptShape& s = *state_.shape;
  GptActivations& acts = **state_.acts;
  gpu::Ops& ops = context.ops;
  gpu::Stream& stream = context.stream;
  std::int64_t rows = s.rows(), c = s.d_model;
  const gpu::Tensor x = acts.residual[static_cast<std::size_t>(layer_)];
  const gpu::Tensor out = acts.residual[static_cast<std::size_t>(layer_ + 1)];
  ops.layer_norm_forward(stream, a.ln1, a.ln1_mean, a.ln1_rstd, x, w[ln1_w], w[ln1_b], rows, c);
  ops.matmul_forward(stream, a.qkv, a.ln1, w[qkv_w], w[qkv_b], rows, c, 3 * c);
  const std::int64_t head_dim = c / s.n_head;
  ops.attention_forward(stream, a.atty, a.lse, a.qkv, s.batch, s.seq_len, s.n_head, s.n_head,
                        head_dim);
  ops.matmul_forward(stream, a.attproj, a.atty, w[proj_w], w[proj_b], rows, c, c);
  ops.residual_layer_norm_forward(stream, a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, x, a.attproj,
                                  w[ln2_w], w[ln2_b], rows, c);
  ops.matmul_gelu_forward(stream, a.fch_gelu, a.fch, a.ln2, w[fc_w], w[fc_b], rows, c, 4 * c);
  ops.matmul_forward(stream, a.fcproj, a.fch_gelu, w[fcproj_w], w[fcproj_b], rows, 4 * c, c);
  ops.residual_forward(stream, out, a.residual2, a.fcproj, rows * c);
}

void GptBlock::forward(StepContext& context, const TensorViews& params,
                       std::span<const TensorViews> /*borrowed*/) {
  run_forward(context, params, (*state_.acts)->block(layer_));
}

void GptBlock::backward(StepContext& context, const TensorViews& w,
                        std::span<const TensorViews> /*borrowed*/, const TensorViews& dw,
                        std::span<const TensorViews> /*borrowed_grads*/) {
  const GptShape& s = *state_.shape;
  GptActivations& acts = **state_.acts;
  BlockActivations& a = acts.block(layer_);
  // With checkpointing the shared activations hold another block's forward: recompute ours.
  if (*state_.checkpointing) run_forward(context, w, a);

  gpu::Ops& ops = context.ops;
  gpu::Stream& stream = context.stream;
  BlockGradients& g = acts.block_grads;
  std::int64_t rows = s.rows(), c = s.d_model;
  const gpu::Tensor x = acts.residual[static_cast<std::size_t>(layer_)];
  const gpu::Tensor dout = acts.dresidual[(layer_ + 1) % 2];
  const gpu::Tensor dx = acts.dresidual[layer_ % 2];
  // The backward kernels accumulate, and these buffers still hold the previous block's values.
  for (gpu::Tensor buffer : {g.dln1, g.datty, g.dattproj, g.dresidual2, g.dln2, g.dfcproj, dx}) {
    zero(context, buffer, rows * c);
  }
  zero(context, g.dqkv, rows * 3 * c);
  zero(context, g.dfch, rows * 4 * c);
  zero(context, g.dfch_gelu, rows * 4 * c);

  ops.residual_backward(stream, g.dresidual2, g.dfcproj, dout, rows * c);
  ops.matmul_backward(stream, g.dfch_gelu, dw[fcproj_w].f32(), dw[fcproj_b].f32(), g.dfcproj,
                      a.fch_gelu, w[fcproj_w], rows, 4 * c, c);
  ops.gelu_backward(stream, g.dfch, a.fch, g.dfch_gelu, rows * 4 * c);
  ops.matmul_backward(stream, g.dln2, dw[fc_w].f32(), dw[fc_b].f32(), g.dfch, a.ln2, w[fc_w], rows,
                      c, 4 * c);
  ops.layer_norm_backward(stream, g.dresidual2, dw[ln2_w].f32(), dw[ln2_b].f32(), g.dln2,
                          a.residual2, w[ln2_w], a.ln2_mean, a.ln2_rstd, rows, c);
  ops.residual_backward(stream, dx, g.dattproj, g.dresidual2, rows * c);
  ops.matmul_backward(stream, g.datty, dw[proj_w].f32(), dw[proj_b].f32(), g.dattproj, a.atty,
                      w[proj_w], rows, c, c);
  ops.attention_backward(stream, g.dqkv, g.datty, a.qkv, a.atty, a.lse, s.batch, s.seq_len,
                         s.n_head, s.n_head, c / s.n_head);
  ops.matmul_backward(stream, g.dln1, dw[qkv_w].f32(), dw[qkv_b].f32(), g.dqkv, a.ln1, w[qkv_w],
                      rows, c, 3 * c);
  ops.layer_norm_backward(stream, dx, dw[ln1_w].f32(), dw[ln1_b].f32(), g.dln1, x, w[ln1_w],
                          a.ln1_mean, a.ln1_rstd, rows, c);
}

std::vector<ParamSpec> GptHead::parameters() const {
  std::int64_t c = state_.shape->d_model;
  return {gain("lnf.weight", c), bias("lnf.bias", c)};
}

void GptHead::forward(StepContext& context, const TensorViews& params,
                      std::span<const TensorViews> borrowed) {
  const GptShape& s = *state_.shape;
  GptActivations& acts = **state_.acts;
  gpu::Ops& ops = context.ops;
  std::int64_t rows = s.rows(), c = s.d_model;
  const gpu::Tensor wte = borrowed[0][0];
  ops.layer_norm_forward(context.stream, acts.lnf, acts.lnf_mean, acts.lnf_rstd,
                         acts.residual.back(), params[0], params[1], rows, c);
  ops.matmul_forward(context.stream, acts.logits, acts.lnf, wte, nullptr, rows, c,
                     s.padded_vocab());
  classify(context, acts.logits, acts.losses, acts.lse, acts.loss, acts.dlosses, acts.targets, rows,
           s.vocab, s.padded_vocab(), acts.logits_hold_gradient);
}

void GptHead::backward(StepContext& context, const TensorViews& params,
                       std::span<const TensorViews> borrowed, const TensorViews& grads,
                       std::span<const TensorViews> borrowed_grads) {
  const GptShape& s = *state_.shape;
  GptActivations& acts = **state_.acts;
  gpu::Ops& ops = context.ops;
  gpu::Stream& stream = context.stream;
  std::int64_t rows = s.rows(), c = s.d_model;
  const gpu::Tensor dx = acts.dresidual[s.n_layer % 2];
  logits_gradient(context, acts.logits, acts.lse, acts.dlosses, acts.targets, rows, s.vocab,
                  s.padded_vocab(), acts.logits_hold_gradient);
  zero(context, acts.dlnf, rows * c);
  zero(context, dx, rows * c);
  ops.matmul_backward(stream, acts.dlnf, borrowed_grads[0][0].f32(), nullptr, acts.logits, acts.lnf,
                      borrowed[0][0], rows, c, s.padded_vocab());
  ops.layer_norm_backward(stream, dx, grads[0].f32(), grads[1].f32(), acts.dlnf,
                          acts.residual.back(), params[0], acts.lnf_mean, acts.lnf_rstd, rows, c);
}

}  // namespace strata::models
