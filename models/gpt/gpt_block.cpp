#include "models/gpt/gpt_block.h"

#include <cmath>

#include "gpu/ops.h"
#include "gpu/stream.h"
#include "models/decoder/decoder_modules.h"

namespace strata::models {
namespace {

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

// Slots of the activation plan (llm.c's ActivationTensors, per layer), in carving order.
enum Activation : std::size_t {
  ln1,
  ln1_mean,
  ln1_rstd,
  qkv,
  atty,
  lse,  // (batch, heads, T): attention's log-sum-exp per query row
  attproj,
  residual2,
  ln2,
  ln2_mean,
  ln2_rstd,
  fch,
  fch_gelu,
  fcproj,
  activation_count
};

// Slots of the gradients of the activations, in carving order.
enum Gradient : std::size_t {
  dln1,
  dqkv,
  datty,
  dattproj,
  dresidual2,
  dln2,
  dfch,
  dfch_gelu,
  dfcproj,
  gradient_count
};

ActivationPlan activation_plan(const GptShape& s) {
  const std::int64_t rows = s.rows(), c = s.d_model;
  ActivationPlan plan(activation_count);
  plan[ln1] = in_compute(rows * c);
  plan[ln1_mean] = in_fp32(rows);
  plan[ln1_rstd] = in_fp32(rows);
  plan[qkv] = in_compute(rows * 3 * c);
  plan[atty] = in_compute(rows * c);
  plan[lse] = in_fp32(s.batch * s.n_head * s.seq_len);
  plan[attproj] = in_compute(rows * c);
  plan[residual2] = in_compute(rows * c);
  plan[ln2] = in_compute(rows * c);
  plan[ln2_mean] = in_fp32(rows);
  plan[ln2_rstd] = in_fp32(rows);
  plan[fch] = in_compute(rows * 4 * c);
  plan[fch_gelu] = in_compute(rows * 4 * c);
  plan[fcproj] = in_compute(rows * c);
  return plan;
}

ActivationPlan gradient_plan(const GptShape& s) {
  const std::int64_t rows = s.rows(), c = s.d_model;
  ActivationPlan plan(gradient_count, in_compute(rows * c));
  plan[dqkv] = in_compute(rows * 3 * c);
  plan[dfch] = in_compute(rows * 4 * c);
  plan[dfch_gelu] = in_compute(rows * 4 * c);
  return plan;
}

class GptBlock final : public DecoderBlock {
 public:
  GptBlock(DecoderState state, std::int64_t layer, std::shared_ptr<const GptShape> shape)
      : DecoderBlock(state, layer, "h." + std::to_string(layer)), shape_(std::move(shape)) {}
  std::vector<ParamSpec> parameters() const override;

 private:
  void run_forward(StepContext& context, const TensorViews& w, const BlockIo& io) override;
  void run_backward(StepContext& context, const TensorViews& w, const TensorViews& dw,
                    const BlockIo& io) override;

  std::shared_ptr<const GptShape> shape_;
};

std::vector<ParamSpec> GptBlock::parameters() const {
  const GptShape& s = *shape_;
  const std::int64_t c = s.d_model;
  // GPT-2 scales the init of the projections that write into the residual stream by
  // 1/sqrt(2 * n_layer), so the stream's variance does not grow with depth.
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(s.n_layer));
  const std::string p = std::string(name()) + ".";
  return {gain_spec(p + "ln1.weight", c),
          bias_spec(p + "ln1.bias", c),
          weight_spec(p + "attn.qkv.weight", {3 * c, c}),
          bias_spec(p + "attn.qkv.bias", 3 * c),
          weight_spec(p + "attn.proj.weight", {c, c}, residual_std),
          bias_spec(p + "attn.proj.bias", c),
          gain_spec(p + "ln2.weight", c),
          bias_spec(p + "ln2.bias", c),
          weight_spec(p + "mlp.fc.weight", {4 * c, c}),
          bias_spec(p + "mlp.fc.bias", 4 * c),
          weight_spec(p + "mlp.proj.weight", {c, 4 * c}, residual_std),
          bias_spec(p + "mlp.proj.bias", c)};
}

void GptBlock::run_forward(StepContext& context, const TensorViews& w, const BlockIo& io) {
  const GptShape& s = *shape_;
  const BlockBuffers& a = io.acts;
  gpu::Ops& ops = context.ops;
  gpu::Stream& stream = context.stream;
  const std::int64_t rows = pass().rows(), c = s.d_model, head_dim = c / s.n_head;
  ops.layer_norm_forward(stream, a[ln1], a[ln1_mean].f32(), a[ln1_rstd].f32(), io.x, w[ln1_w],
                         w[ln1_b], rows, c);
  ops.matmul_forward(stream, a[qkv], a[ln1], w[qkv_w], w[qkv_b], rows, c, 3 * c);
  attention(context, a[atty], a[lse].f32(), a[qkv], s.n_head, s.n_head, head_dim);
  ops.matmul_forward(stream, a[attproj], a[atty], w[proj_w], w[proj_b], rows, c, c);
  ops.residual_layer_norm_forward(stream, a[residual2], a[ln2], a[ln2_mean].f32(),
                                  a[ln2_rstd].f32(), io.x, a[attproj], w[ln2_w], w[ln2_b], rows, c);
  ops.matmul_gelu_forward(stream, a[fch_gelu], a[fch], a[ln2], w[fc_w], w[fc_b], rows, c, 4 * c);
  ops.matmul_forward(stream, a[fcproj], a[fch_gelu], w[fcproj_w], w[fcproj_b], rows, 4 * c, c);
  ops.residual_forward(stream, io.out, a[residual2], a[fcproj], rows * c);
}

void GptBlock::run_backward(StepContext& context, const TensorViews& w, const TensorViews& dw,
                            const BlockIo& io) {
  const GptShape& s = *shape_;
  const BlockBuffers& a = io.acts;
  const BlockBuffers& g = io.grads;
  gpu::Ops& ops = context.ops;
  gpu::Stream& stream = context.stream;
  const std::int64_t rows = s.rows(), c = s.d_model;
  ops.residual_backward(stream, g[dresidual2], g[dfcproj], io.dout, rows * c);
  ops.matmul_backward(stream, g[dfch_gelu], dw[fcproj_w].f32(), dw[fcproj_b].f32(), g[dfcproj],
                      a[fch_gelu], w[fcproj_w], rows, 4 * c, c);
  ops.gelu_backward(stream, g[dfch], a[fch], g[dfch_gelu], rows * 4 * c);
  ops.matmul_backward(stream, g[dln2], dw[fc_w].f32(), dw[fc_b].f32(), g[dfch], a[ln2], w[fc_w],
                      rows, c, 4 * c);
  ops.layer_norm_backward(stream, g[dresidual2], dw[ln2_w].f32(), dw[ln2_b].f32(), g[dln2],
                          a[residual2], w[ln2_w], a[ln2_mean].f32(), a[ln2_rstd].f32(), rows, c);
  ops.residual_backward(stream, io.dx, g[dattproj], g[dresidual2], rows * c);
  ops.matmul_backward(stream, g[datty], dw[proj_w].f32(), dw[proj_b].f32(), g[dattproj], a[atty],
                      w[proj_w], rows, c, c);
  ops.attention_backward(stream, g[dqkv], g[datty], a[qkv], a[atty], a[lse].f32(), s.batch,
                         s.seq_len, s.n_head, s.n_head, c / s.n_head);
  ops.matmul_backward(stream, g[dln1], dw[qkv_w].f32(), dw[qkv_b].f32(), g[dqkv], a[ln1], w[qkv_w],
                      rows, c, 3 * c);
  ops.layer_norm_backward(stream, io.dx, dw[ln1_w].f32(), dw[ln1_b].f32(), g[dln1], io.x, w[ln1_w],
                          a[ln1_mean].f32(), a[ln1_rstd].f32(), rows, c);
}

}  // namespace

BlockFamily gpt_blocks(std::shared_ptr<const GptShape> shape) {
  BlockFamily family{{}, activation_plan(*shape), gradient_plan(*shape)};
  family.make = [shape](const DecoderState& state, std::int64_t layer) {
    return std::make_unique<GptBlock>(state, layer, shape);
  };
  return family;
}

}  // namespace strata::models
