#include "models/decoder/decoder_activations.h"

#include "base/assert.h"
#include "gpu/device.h"
#include "gpu/stream.h"
#include "models/activation_carver.h"

namespace strata::models {
namespace {

BlockBuffers carve_plan(ActivationCarver& carver, const ActivationPlan& plan, gpu::DataType t) {
  BlockBuffers buffers;
  for (const PlannedBuffer& planned : plan) {
    buffers.tensors.push_back(planned.fp32 ? gpu::Tensor(carver.take<float>(planned.elements))
                                           : carver.take(t, planned.elements));
    buffers.elements.push_back(planned.elements);
  }
  return buffers;
}

void carve(ActivationCarver& carver, const DecoderSpec& spec, bool checkpointing, gpu::DataType t,
           DecoderActivations& acts) {
  const std::int64_t rows = spec.rows(), c = spec.d_model, v = spec.padded_vocab();
  acts.tokens = carver.take<std::int32_t>(rows);
  acts.targets = carver.take<std::int32_t>(rows);
  if (!spec.constants.empty())
    acts.constants = carver.take<float>(static_cast<std::int64_t>(spec.constants.size()));
  acts.residual.assign(static_cast<std::size_t>(spec.n_layer + 1), {});
  for (auto& stream : acts.residual)
    stream = carver.take(t, rows * c);
  acts.blocks.clear();
  for (std::int64_t block = 0; block < (checkpointing ? 1 : spec.n_layer); ++block)
    acts.blocks.push_back(carve_plan(carver, spec.blocks.activations, t));
  acts.block_grads = carve_plan(carver, spec.blocks.gradients, t);
  acts.dresidual[0] = carver.take(t, rows * c);
  acts.dresidual[1] = carver.take(t, rows * c);
  acts.norm = carver.take(t, rows * c);
  if (spec.final_norm.kind == NormKind::layer_norm) acts.norm_mean = carver.take<float>(rows);
  acts.norm_rstd = carver.take<float>(rows);
  acts.dnorm = carver.take(t, rows * c);
  acts.logits = carver.take(t, rows * v);
  acts.losses = carver.take<float>(rows);
  acts.lse = carver.take<float>(rows);
  acts.dlosses = carver.take<float>(rows);
  acts.loss = carver.take<float>(1);
}

}  // namespace

std::int64_t DecoderActivations::bytes_needed(const DecoderSpec& spec, bool checkpointing,
                                              gpu::DataType compute) {
  ActivationCarver counter(nullptr);
  DecoderActivations sized_only;
  carve(counter, spec, checkpointing, compute, sized_only);
  return counter.bytes();
}

DecoderActivations::DecoderActivations(gpu::Device& device, const DecoderSpec& spec,
                                       bool checkpointing, gpu::DataType compute)
    : checkpointing_(checkpointing) {
  storage_ = device.allocate(bytes_needed(spec, checkpointing, compute), "activations");
  ActivationCarver carver(storage_.as<std::byte>());
  carve(carver, spec, checkpointing, compute, *this);
  if (spec.constants.empty()) return;
  // The constants are the model's: on the device once, before any step.
  gpu::Stream& stream = device.compute_stream();
  stream.copy(constants, spec.constants.data(),
              static_cast<std::int64_t>(spec.constants.size() * sizeof(float)),
              gpu::CopyKind::host_to_device);
  stream.synchronize();
}

BlockBuffers& DecoderActivations::block(std::int64_t layer) {
  STRATA_ASSERT(layer >= 0);
  if (checkpointing_) return blocks.front();
  STRATA_ASSERT(static_cast<std::size_t>(layer) < blocks.size());
  return blocks[static_cast<std::size_t>(layer)];
}

}  // namespace strata::models
