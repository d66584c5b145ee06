#include "models/gpt/gpt_activations.h"

#include "base/assert.h"
#include "gpu/device.h"
#include "models/activation_carver.h"

namespace strata::models {
namespace {

using Carver = ActivationCarver;

void carve_block(Carver& carver, const GptShape& shape, gpu::DataType t, BlockActivations& block) {
  std::int64_t rows = shape.rows(), c = shape.d_model;
  block.ln1 = carver.take(t, rows * c);
  block.ln1_mean = carver.take<float>(rows);
  block.ln1_rstd = carver.take<float>(rows);
  block.qkv = carver.take(t, rows * 3 * c);
  block.atty = carver.take(t, rows * c);
  block.lse = carver.take<float>(shape.batch * shape.n_head * shape.seq_len);
  block.attproj = carver.take(t, rows * c);
  block.residual2 = carver.take(t, rows * c);
  block.ln2 = carver.take(t, rows * c);
  block.ln2_mean = carver.take<float>(rows);
  block.ln2_rstd = carver.take<float>(rows);
  block.fch = carver.take(t, rows * 4 * c);
  block.fch_gelu = carver.take(t, rows * 4 * c);
  block.fcproj = carver.take(t, rows * c);
}

void carve(Carver& carver, const GptShape& shape, bool checkpointing, gpu::DataType t,
           GptActivations& acts) {
  std::int64_t rows = shape.rows(), c = shape.d_model, v = shape.padded_vocab();
  acts.tokens = carver.take<std::int32_t>(rows);
  acts.targets = carver.take<std::int32_t>(rows);
  acts.residual.assign(static_cast<std::size_t>(shape.n_layer + 1), {});
  for (auto& stream : acts.residual)
    stream = carver.take(t, rows * c);
  acts.blocks.assign(checkpointing ? 1 : static_cast<std::size_t>(shape.n_layer), {});
  for (auto& block : acts.blocks)
    carve_block(carver, shape, t, block);
  BlockGradients& g = acts.block_grads;
  g.dln1 = carver.take(t, rows * c);
  g.dqkv = carver.take(t, rows * 3 * c);
  g.datty = carver.take(t, rows * c);
  g.dattproj = carver.take(t, rows * c);
  g.dresidual2 = carver.take(t, rows * c);
  g.dln2 = carver.take(t, rows * c);
  g.dfch = carver.take(t, rows * 4 * c);
  g.dfch_gelu = carver.take(t, rows * 4 * c);
  g.dfcproj = carver.take(t, rows * c);
  acts.dresidual[0] = carver.take(t, rows * c);
  acts.dresidual[1] = carver.take(t, rows * c);
  acts.lnf = carver.take(t, rows * c);
  acts.lnf_mean = carver.take<float>(rows);
  acts.lnf_rstd = carver.take<float>(rows);
  acts.dlnf = carver.take(t, rows * c);
  acts.logits = carver.take(t, rows * v);
  acts.losses = carver.take<float>(rows);
  acts.lse = carver.take<float>(rows);
  acts.dlosses = carver.take<float>(rows);
  acts.loss = carver.take<float>(1);
}

}  // namespace

std::int64_t GptActivations::bytes_needed(const GptShape& shape, bool checkpointing,
                                          gpu::DataType compute) {
  Carver counter(nullptr);
  GptActivations sized_only;
  carve(counter, shape, checkpointing, compute, sized_only);
  return counter.bytes();
}

GptActivations::GptActivations(gpu::Device& device, const GptShape& shape, bool checkpointing,
                               gpu::DataType compute)
    : checkpointing_(checkpointing) {
  storage_ = device.allocate(bytes_needed(shape, checkpointing, compute), "activations");
  Carver carver(storage_.as<std::byte>());
  carve(carver, shape, checkpointing, compute, *this);
}

BlockActivations& GptActivations::block(std::int64_t layer) {
  STRATA_ASSERT(layer >= 0);
  if (checkpointing_) return blocks.front();
  STRATA_ASSERT(static_cast<std::size_t>(layer) < blocks.size());
  return blocks[static_cast<std::size_t>(layer)];
}

}  // namespace strata::models
