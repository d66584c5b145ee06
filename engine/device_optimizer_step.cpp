#include "engine/device_optimizer_step.h"

#include <algorithm>
#include <array>
#include <utility>

#include "engine/param_storage.h"

namespace strata::engine {
namespace {

constexpr std::int64_t kFloat = sizeof(float);

}  // namespace

DeviceOptimizerStep::DeviceOptimizerStep(const Runtime& runtime, const Optimizer& optimizer,
                                         ParamCopy copy_type, std::vector<zero::Range> sub_groups,
                                         std::int64_t partition_numel, zero::ParamTier& tier)
    : runtime_(runtime),
      optimizer_(optimizer),
      copy_type_(copy_type),
      sub_groups_(std::move(sub_groups)),
      partition_numel_(partition_numel),
      tier_(tier) {
  gpu::Device& device = runtime_.device;
  const Plan states = plan(partition_numel, optimizer.state_count());
  master_ = device.allocate(states.state_bytes, "fp32 master parameters");
  // Adagrad keeps only exp_avg_sq, Lion only exp_avg.
  if (optimizer.type() != OptimizerType::adagrad)
    exp_avg_ = device.allocate(states.state_bytes, "optimizer exp_avg");
  if (optimizer.type() != OptimizerType::lion)
    exp_avg_sq_ = device.allocate(states.state_bytes, "optimizer exp_avg_sq");
  STRATA_ASSERT(master_.bytes() + exp_avg_.bytes() + exp_avg_sq_.bytes() == states.device_bytes());
}

DeviceOptimizerStep::Plan DeviceOptimizerStep::plan(std::int64_t partition_numel, int moments) {
  return {partition_numel * kFloat, 1 + moments};
}

// One fused optimizer op per sub-group, as the offloaded optimizer steps them, writing the
// storage copy into the tier's partition as it goes; an fp32 model's copy is the master itself.
bool DeviceOptimizerStep::step(const StepHyperparameters& hyper, StepStats& stats,
                               const StatesVisitor& save) {
  STRATA_ASSERT(!save && reducer_ != nullptr);
  if (stats.skipped) return false;
  std::byte* shards = tier_.device_partition();
  const std::int64_t copy_bytes = gpu::size_bytes(to_data_type(copy_type_));
  for (const zero::Range& group : sub_groups_) {
    gpu::OptimizerArrays arrays;
    arrays.params = master_.as<float>() + group.begin;
    arrays.grads = reducer_->device_partition() + group.begin;
    arrays.exp_avg = exp_avg_ ? exp_avg_.as<float>() + group.begin : nullptr;
    arrays.exp_avg_sq = exp_avg_sq_ ? exp_avg_sq_.as<float>() + group.begin : nullptr;
    if (copy_type_ != ParamCopy::none) {
      arrays.param_copy = shards + group.begin * copy_bytes;
      arrays.copy_type = to_data_type(copy_type_);
    }
    optimizer_.step_on_device(runtime_.ops, stream(), hyper, arrays, group.size());
  }
  if (copy_type_ == ParamCopy::none)
    stream().copy(shards, master_.data(), master_.bytes(), gpu::CopyKind::device_to_device);
  return false;
}

OptimizerStep::States DeviceOptimizerStep::chunk_states(
    zero::Range range, std::vector<std::vector<float>>& host) const {
  const std::array<const gpu::DeviceBuffer*, 3> buffers = {&master_, &exp_avg_, &exp_avg_sq_};
  std::array<std::span<float>, 3> spans;
  host.resize(buffers.size());
  for (std::size_t b = 0; b < buffers.size(); ++b) {
    if (!*buffers[b]) continue;
    host[b].resize(static_cast<std::size_t>(range.size()));
    spans[b] = host[b];
  }
  return States{range, spans[0], spans[1], spans[2]};
}

// Chunk by chunk through host memory: the states up to the device, the masters in the storage
// type to the tier's device partition beside them.
void DeviceOptimizerStep::fill_states(const StatesVisitor& fill) {
  const std::int64_t element = gpu::size_bytes(to_data_type(copy_type_));
  std::vector<std::vector<float>> host;
  std::vector<std::byte> shards;
  for (std::int64_t begin = 0; begin < partition_numel_; begin += kStateChunk) {
    const zero::Range range{begin, std::min(partition_numel_, begin + kStateChunk)};
    const States states = chunk_states(range, host);
    fill(states);
    const std::array<std::pair<gpu::DeviceBuffer*, std::span<float>>, 3> targets = {
        {{&master_, states.params},
         {&exp_avg_, states.exp_avg},
         {&exp_avg_sq_, states.exp_avg_sq}}};
    for (const auto& [buffer, values] : targets) {
      if (!*buffer) continue;
      stream().copy(buffer->as<float>() + begin, values.data(), values.size_bytes(),
                    gpu::CopyKind::host_to_device);
    }
    shards.resize(static_cast<std::size_t>(range.size() * element));
    to_storage(copy_type_, states.params, shards.data());
    stream().copy(tier_.device_partition() + begin * element, shards.data(), range.size() * element,
                  gpu::CopyKind::host_to_device);
    stream().synchronize();  // the host buffers are refilled next
  }
}

void DeviceOptimizerStep::visit_states(const StatesVisitor& visit) {
  const std::array<const gpu::DeviceBuffer*, 3> buffers = {&master_, &exp_avg_, &exp_avg_sq_};
  std::vector<std::vector<float>> host;
  for (std::int64_t begin = 0; begin < partition_numel_; begin += kStateChunk) {
    const zero::Range range{begin, std::min(partition_numel_, begin + kStateChunk)};
    const States states = chunk_states(range, host);
    for (std::size_t b = 0; b < buffers.size(); ++b) {
      if (!*buffers[b]) continue;
      stream().copy(host[b].data(), buffers[b]->as<float>() + begin, range.size() * kFloat,
                    gpu::CopyKind::device_to_host);
    }
    stream().synchronize();
    visit(states);
  }
}

void DeviceOptimizerStep::read_masters(std::span<float> out) {
  STRATA_ASSERT(static_cast<std::int64_t>(out.size()) == partition_numel_);
  stream().copy(out.data(), master_.data(), partition_numel_ * kFloat,
                gpu::CopyKind::device_to_host);
  stream().synchronize();
}

}  // namespace strata::engine
