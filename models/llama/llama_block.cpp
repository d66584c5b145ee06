#include "models/llama/llama_block.h"

#include "gpu/ops.h"
#include "gpu/stream.h"
#include "models/decoder/decoder_modules.h"

namespace strata::models {
namespace {

using engine::ParamSpec;
using engine::StepContext;
using engine::TensorViews;

// Slots of the activation plan, in carving order.
enum Activation : std::size_t {
  ln1,
  ln1_rstd,
  q,          // (rows, H x D)
  k,          // (rows, Hkv x D)
  v,          // (rows, Hkv x D)
  qkv,        // (rows, (H + 2 Hkv) x D): [q | k | v], q and k rotated
  lse,        // (batch, H, T): attention's log-sum-exp per query row
  atty,       // (rows, H x D)
  attproj,    // (rows, C)
  residual2,  // (rows, C)
  ln2,
  ln2_rstd,
  gate,  // (rows, F)
  up,    // (rows, F)
  act,   // (rows, F): silu(gate) * up
  mlp,   // (rows, C)
  activation_count
};

// Slots of the gradients of the activations, in carving order.
enum Gradient : std::size_t {
  dln1,
  dq,
  dk,
  dv,
  dqkv,
  datty,
  dattproj,
  dresidual2,
  dln2,
  dgate,
  dup,
  dact,
  dmlp,
  gradient_count
};

// Widths of a row of the block's tensors.
struct Widths {
  std::int64_t c, f, d, q, kv;  // hidden, MLP, head, the query heads', the key/value heads'
};

Widths widths(const LlamaShape& s) {
  const std::int64_t d = s.head_dim();
  return {s.d_model, s.d_ff, d, s.n_head * d, s.n_kv_head * d};
}

ActivationPlan activation_plan(const LlamaShape& s) {
  const std::int64_t rows = s.rows();
  const Widths n = widths(s);
  ActivationPlan plan(activation_count);
  plan[ln1] = in_compute(rows * n.c);
  plan[ln1_rstd] = in_fp32(rows);
  plan[q] = in_compute(rows * n.q);
  plan[k] = in_compute(rows * n.kv);
  plan[v] = in_compute(rows * n.kv);
  plan[qkv] = in_compute(rows * (n.q + 2 * n.kv));
  plan[lse] = in_fp32(s.batch * s.n_head * s.seq_len);
  plan[atty] = in_compute(rows * n.q);
  plan[attproj] = in_compute(rows * n.c);
  plan[residual2] = in_compute(rows * n.c);
  plan[ln2] = in_compute(rows * n.c);
  plan[ln2_rstd] = in_fp32(rows);
  plan[gate] = in_compute(rows * n.f);
  plan[up] = in_compute(rows * n.f);
  plan[act] = in_compute(rows * n.f);
  plan[mlp] = in_compute(rows * n.c);
  return plan;
}

ActivationPlan gradient_plan(const LlamaShape& s) {
  const std::int64_t rows = s.rows();
  const Widths n = widths(s);
  ActivationPlan plan(gradient_count, in_compute(rows * n.c));
  plan[dq] = plan[datty] = in_compute(rows * n.q);
  plan[dk] = plan[dv] = in_compute(rows * n.kv);
  plan[dqkv] = in_compute(rows * (n.q + 2 * n.kv));
  plan[dgate] = plan[dup] = plan[dact] = in_compute(rows * n.f);
  return plan;
}

class LlamaBlock final : public DecoderBlock {
 public:
  LlamaBlock(DecoderState state, std::int64_t layer, std::shared_ptr<const LlamaShape> shape)
      : DecoderBlock(state, layer, "model.layers." + std::to_string(layer)),
        shape_(std::move(shape)) {}
  std::vector<ParamSpec> parameters() const override;

 private:
  // Positions of the block's tensors in parameters(), with or without the q/k/v biases.
  struct Slots {
    std::size_t ln1, q, q_bias, k, k_bias, v, v_bias, o, ln2, gate, up, down;
  };
  Slots slots() const;
  void run_forward(StepContext& context, const TensorViews& w, const BlockIo& io) override;
  void run_backward(StepContext& context, const TensorViews& w, const TensorViews& dw,
                    const BlockIo& io) override;

  std::shared_ptr<const LlamaShape> shape_;
};

LlamaBlock::Slots LlamaBlock::slots() const {
  const bool biased = shape_->qkv_bias;
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
  const LlamaShape& s = *shape_;
  const Widths n = widths(s);
  const std::string p = std::string(name()) + ".";
  std::vector<ParamSpec> specs = {gain_spec(p + "input_layernorm.weight", n.c),
                                  weight_spec(p + "self_attn.q_proj.weight", {n.q, n.c})};
  if (s.qkv_bias) specs.push_back(bias_spec(p + "self_attn.q_proj.bias", n.q));
  specs.push_back(weight_spec(p + "self_attn.k_proj.weight", {n.kv, n.c}));
  if (s.qkv_bias) specs.push_back(bias_spec(p + "self_attn.k_proj.bias", n.kv));
  specs.push_back(weight_spec(p + "self_attn.v_proj.weight", {n.kv, n.c}));
  if (s.qkv_bias) specs.push_back(bias_spec(p + "self_attn.v_proj.bias", n.kv));
  specs.push_back(weight_spec(p + "self_attn.o_proj.weight", {n.c, n.q}));
  specs.push_back(gain_spec(p + "post_attention_layernorm.weight", n.c));
  specs.push_back(weight_spec(p + "mlp.gate_proj.weight", {n.f, n.c}));
  specs.push_back(weight_spec(p + "mlp.up_proj.weight", {n.f, n.c}));
  specs.push_back(weight_spec(p + "mlp.down_proj.weight", {n.c, n.f}));
  return specs;
}

void LlamaBlock::run_forward(StepContext& context, const TensorViews& w, const BlockIo& io) {
  const LlamaShape& s = *shape_;
  const BlockBuffers& a = io.acts;
  gpu::Ops& ops = context.ops;
  gpu::Stream& stream = context.stream;
  const Slots at = slots();
  const Widths n = widths(s);
  const std::int64_t rows = pass().rows();
  const bool biased = s.qkv_bias;
  ops.rms_norm_forward(stream, a[ln1], a[ln1_rstd].f32(), io.x, w[at.ln1], s.rms_norm_eps, rows,
                       n.c);
  ops.matmul_forward(stream, a[q], a[ln1], w[at.q], biased ? w[at.q_bias] : nullptr, rows, n.c,
                     n.q);
  ops.matmul_forward(stream, a[k], a[ln1], w[at.k], biased ? w[at.k_bias] : nullptr, rows, n.c,
                     n.kv);
  ops.matmul_forward(stream, a[v], a[ln1], w[at.v], biased ? w[at.v_bias] : nullptr, rows, n.c,
                     n.kv);
  ops.qkv_pack_forward(stream, a[qkv], a[q], a[k], a[v], rows, s.n_head, s.n_kv_head, n.d);
  // The n_head q heads and n_kv_head k heads lie side by side at the start of each packed row
  // [q | k | v]: one rotation covers both.
  ops.rope_forward(stream, a[qkv], io.constants, pass().start(), pass().batch, pass().tokens,
                   s.n_head + s.n_kv_head, n.d, n.q + 2 * n.kv);
  attention(context, a[atty], a[lse].f32(), a[qkv], s.n_head, s.n_kv_head, n.d);
  ops.matmul_forward(stream, a[attproj], a[atty], w[at.o], nullptr, rows, n.q, n.c);
  ops.residual_rms_norm_forward(stream, a[residual2], a[ln2], a[ln2_rstd].f32(), io.x, a[attproj],
                                w[at.ln2], s.rms_norm_eps, rows, n.c);
  ops.matmul_forward(stream, a[gate], a[ln2], w[at.gate], nullptr, rows, n.c, n.f);
  ops.matmul_forward(stream, a[up], a[ln2], w[at.up], nullptr, rows, n.c, n.f);
  ops.swiglu_forward(stream, a[act], a[gate], a[up], rows * n.f);
  ops.matmul_forward(stream, a[mlp], a[act], w[at.down], nullptr, rows, n.f, n.c);
  ops.residual_forward(stream, io.out, a[residual2], a[mlp], rows * n.c);
}

void LlamaBlock::run_backward(StepContext& context, const TensorViews& w, const TensorViews& dw,
                              const BlockIo& io) {
  const LlamaShape& s = *shape_;
  const BlockBuffers& a = io.acts;
  const BlockBuffers& g = io.grads;
  gpu::Ops& ops = context.ops;
  gpu::Stream& stream = context.stream;
  const Slots at = slots();
  const Widths n = widths(s);
  const std::int64_t rows = s.rows();
  const auto bias_grad = [&](std::size_t slot) { return s.qkv_bias ? dw[slot].f32() : nullptr; };
  ops.residual_backward(stream, g[dresidual2], g[dmlp], io.dout, rows * n.c);
  ops.matmul_backward(stream, g[dact], dw[at.down].f32(), nullptr, g[dmlp], a[act], w[at.down],
                      rows, n.f, n.c);
  ops.swiglu_backward(stream, g[dgate], g[dup], g[dact], a[gate], a[up], rows * n.f);
  ops.matmul_backward(stream, g[dln2], dw[at.up].f32(), nullptr, g[dup], a[ln2], w[at.up], rows,
                      n.c, n.f);
  ops.matmul_backward(stream, g[dln2], dw[at.gate].f32(), nullptr, g[dgate], a[ln2], w[at.gate],
                      rows, n.c, n.f);
  ops.rms_norm_backward(stream, g[dresidual2], dw[at.ln2].f32(), g[dln2], a[residual2], w[at.ln2],
                        a[ln2_rstd].f32(), rows, n.c);
  ops.residual_backward(stream, io.dx, g[dattproj], g[dresidual2], rows * n.c);
  ops.matmul_backward(stream, g[datty], dw[at.o].f32(), nullptr, g[dattproj], a[atty], w[at.o],
                      rows, n.q, n.c);
  ops.attention_backward(stream, g[dqkv], g[datty], a[qkv], a[atty], a[lse].f32(), s.batch,
                         s.seq_len, s.n_head, s.n_kv_head, n.d);
  ops.rope_backward(stream, g[dqkv], io.constants, s.batch, s.seq_len, s.n_head + s.n_kv_head, n.d,
                    n.q + 2 * n.kv);
  ops.qkv_pack_backward(stream, g[dq], g[dk], g[dv], g[dqkv], rows, s.n_head, s.n_kv_head, n.d);
  ops.matmul_backward(stream, g[dln1], dw[at.q].f32(), bias_grad(at.q_bias), g[dq], a[ln1], w[at.q],
                      rows, n.c, n.q);
  ops.matmul_backward(stream, g[dln1], dw[at.k].f32(), bias_grad(at.k_bias), g[dk], a[ln1], w[at.k],
                      rows, n.c, n.kv);
  ops.matmul_backward(stream, g[dln1], dw[at.v].f32(), bias_grad(at.v_bias), g[dv], a[ln1], w[at.v],
                      rows, n.c, n.kv);
  ops.rms_norm_backward(stream, io.dx, dw[at.ln1].f32(), g[dln1], io.x, w[at.ln1],
                        a[ln1_rstd].f32(), rows, n.c);
}

}  // namespace

BlockFamily llama_blocks(std::shared_ptr<const LlamaShape> shape) {
  BlockFamily family{{}, activation_plan(*shape), gradient_plan(*shape)};
  family.make = [shape](const DecoderState& state, std::int64_t layer) {
    return std::make_unique<LlamaBlock>(state, layer, shape);
  };
  return family;
}

}  // namespace strata::models
