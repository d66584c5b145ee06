#include "models/llama/llama_activations.h"

#include "base/assert.h"
#include "gpu/device.h"
#include "gpu/stream.h"
#include "models/activation_carver.h"

namespace strata::models {
namespace {

void carve_block(ActivationCarver& carver, const LlamaShape& s, gpu::DataType t,
                 LlamaBlockActivations& b) {
  const std::int64_t rows = s.rows(), c = s.d_model, f = s.d_ff;
  const std::int64_t q = s.n_head * s.head_dim(), kv = s.n_kv_head * s.head_dim();
  b.ln1 = carver.take(t, rows * c);
  b.ln1_rstd = carver.take<float>(rows);
  b.q = carver.take(t, rows * q);
  b.k = carver.take(t, rows * kv);
  b.v = carver.take(t, rows * kv);
  b.qkv = carver.take(t, rows * (q + 2 * kv));
  b.lse = carver.take<float>(s.batch * s.n_head * s.seq_len);
  b.atty = carver.take(t, rows * q);
  b.attproj = carver.take(t, rows * c);
  b.residual2 = carver.take(t, rows * c);
  b.ln2 = carver.take(t, rows * c);
  b.ln2_rstd = carver.take<float>(rows);
  b.gate = carver.take(t, rows * f);
  b.up = carver.take(t, rows * f);
  b.act = carver.take(t, rows * f);
  b.mlp = carver.take(t, rows * c);
}

void carve(ActivationCarver& carver, const LlamaShape& s, bool checkpointing, gpu::DataType t,
           LlamaActivations& acts) {
  const std::int64_t rows = s.rows(), c = s.d_model, f = s.d_ff, v = s.padded_vocab();
  const std::int64_t q = s.n_head * s.head_dim(), kv = s.n_kv_head * s.head_dim();
  acts.tokens = carver.take<std::int32_t>(rows);
  acts.targets = carver.take<std::int32_t>(rows);
  acts.inv_freq = carver.take<float>(s.head_dim() / 2);
  acts.residual.assign(static_cast<std::size_t>(s.n_layer + 1), {});
  for (auto& stream : acts.residual)
    stream = carver.take(t, rows * c);
  acts.blocks.assign(checkpointing ? 1 : static_cast<std::size_t>(s.n_layer), {});
  for (auto& block : acts.blocks)
    carve_block(carver, s, t, block);
  LlamaBlockGradients& g = acts.block_grads;
  g.dln1 = carver.take(t, rows * c);
  g.dq = carver.take(t, rows * q);
  g.dk = carver.take(t, rows * kv);
  g.dv = carver.take(t, rows * kv);
  g.dqkv = carver.take(t, rows * (q + 2 * kv));
  g.datty = carver.take(t, rows * q);
  g.dattproj = carver.take(t, rows * c);
  g.dresidual2 = carver.take(t, rows * c);
  g.dln2 = carver.take(t, rows * c);
  g.dgate = carver.take(t, rows * f);
  g.dup = carver.take(t, rows * f);
  g.dact = carver.take(t, rows * f);
  g.dmlp = carver.take(t, rows * c);
  acts.dresidual[0] = carver.take(t, rows * c);
  acts.dresidual[1] = carver.take(t, rows * c);
  acts.norm = carver.take(t, rows * c);
  acts.norm_rstd = carver.take<float>(rows);
  acts.dnorm = carver.take(t, rows * c);
  acts.logits = carver.take(t, rows * v);
  acts.losses = carver.take<float>(rows);
  acts.lse = carver.take<float>(rows);
  acts.dlosses = carver.take<float>(rows);
  acts.loss = carver.take<float>(1);
}

}  // namespace

std::int64_t LlamaActivations::bytes_needed(const LlamaShape& shape, bool checkpointing,
                                            gpu::DataType compute) {
  ActivationCarver counter(nullptr);
  LlamaActivations sized_only;
  carve(counter, shape, checkpointing, compute, sized_only);
  return counter.bytes();
}

LlamaActivations::LlamaActivations(gpu::Device& device, const LlamaShape& shape, bool checkpointing,
                                   gpu::DataType compute)
    : checkpointing_(checkpointing) {
  STRATA_ASSERT(static_cast<std::int64_t>(shape.inv_freq.size()) == shape.head_dim() / 2);
  storage_ = device.allocate(bytes_needed(shape, checkpointing, compute), "activations");
  ActivationCarver carver(storage_.as<std::byte>());
  carve(carver, shape, checkpointing, compute, *this);
  // The frequencies are constants of the model: on the device once, before any step.
  gpu::Stream& stream = device.compute_stream();
  stream.copy(inv_freq, shape.inv_freq.data(),
              static_cast<std::int64_t>(shape.inv_freq.size() * sizeof(float)),
              gpu::CopyKind::host_to_device);
  stream.synchronize();
}

LlamaBlockActivations& LlamaActivations::block(std::int64_t layer) {
  STRATA_ASSERT(layer >= 0);
  if (checkpointing_) return blocks.front();
  STRATA_ASSERT(static_cast<std::size_t>(layer) < blocks.size());
  return blocks[static_cast<std::size_t>(layer)];
}

}  // namespace strata::models
