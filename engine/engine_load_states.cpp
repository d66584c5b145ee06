// How the Engine's states get their values, at start-up and from a checkpoint: range by range,
// straight into the tier that holds them, so that no step of the engine's life holds a whole
// partition in CPU memory (docs/memory.md).
#include <algorithm>
#include <array>
#include <chrono>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/shard_pieces.h"
#include "engine/engine_state.h"
#include "engine/param_init.h"

namespace strata::engine {

// An offloaded optimizer takes its states sub-group by sub-group (through its swap buffers on
// NVMe), and each sub-group's masters, in the storage type, go to the parameter tier. An
// optimizer on the device takes them in chunks, the tier's device partition beside them.
void Engine::State::load_states(const StateSource& source) {
  if (offload) {
    offload->fill_states([&](const zero::OptimizerOffload::SubGroupStates& states) {
      source(checkpoint::kMasterState, states.range, states.params);
      if (!states.exp_avg.empty()) source(checkpoint::kExpAvgState, states.range, states.exp_avg);
      if (!states.exp_avg_sq.empty())
        source(checkpoint::kExpAvgSqState, states.range, states.exp_avg_sq);
      to_storage(copy_type, states.params, tier->values(states.range).data());
      tier->commit(states.range);
    });
    coordinator->invalidate();
    return;
  }
  const std::int64_t n = layout.partition_numel();
  const std::int64_t element = gpu::size_bytes(storage);
  std::vector<float> values(static_cast<std::size_t>(std::min(n, kDeviceStateChunk)));
  std::vector<std::byte> shards(values.size() * static_cast<std::size_t>(element));
  const std::array<std::pair<gpu::DeviceBuffer*, const char*>, 3> targets = {
      {{&master, checkpoint::kMasterState},
       {&exp_avg, checkpoint::kExpAvgState},
       {&exp_avg_sq, checkpoint::kExpAvgSqState}}};
  for (std::int64_t begin = 0; begin < n; begin += kDeviceStateChunk) {
    const zero::Range range{begin, std::min(n, begin + kDeviceStateChunk)};
    std::span<float> chunk = std::span(values).first(static_cast<std::size_t>(range.size()));
    for (const auto& [buffer, state] : targets) {
      if (!*buffer) continue;
      source(state, range, chunk);
      stream().copy(buffer->as<float>() + begin, chunk.data(), chunk.size_bytes(),
                    gpu::CopyKind::host_to_device);
      if (buffer == &master) {
        to_storage(copy_type, chunk, shards.data());
        stream().copy(tier->device_partition() + begin * element, shards.data(),
                      range.size() * element, gpu::CopyKind::host_to_device);
      }
      stream().synchronize();  // the host buffers are refilled next
    }
  }
  coordinator->invalidate();
}

// The initial values: the model's pretrained weights when it brings them, else the seed's (every
// element of a tensor a pure function of (seed, tensor, element), engine/param_init.h); each
// range is made on its own, whatever the layout; the padding and the gaps between tensors are
// zero, and so are the optimizer's moments.
void Engine::State::initialise_states() {
  std::vector<const ParamSpec*> specs;
  const std::vector<std::vector<ParamSpec>> declared = declared_parameters(model);
  for (const std::vector<ParamSpec>& module : declared)
    for (const ParamSpec& spec : module)
      specs.push_back(&spec);
  STRATA_ASSERT(specs.size() == layout.all_tensors().size());
  const std::vector<checkpoint::Piece> pieces = checkpoint::shard_pieces(layout, shard_rank());
  checkpoint::PieceCursor cursor(pieces);
  const zero::TensorSlot* first_tensor = layout.all_tensors().data();
  const WeightSource* pretrained = model.pretrained_weights();
  // How long the weights' reads take of the start-up (the rest is the tiers' filling), logged so
  // that an import can be set beside reading the files alone.
  std::chrono::steady_clock::duration reading{};
  load_states([&](const std::string& state, zero::Range range, std::span<float> out) {
    std::fill(out.begin(), out.end(), 0.0f);
    if (state != checkpoint::kMasterState) return;
    cursor.for_each_in(
        range, [&](const checkpoint::Piece& piece, std::int64_t begin, std::int64_t end) {
          const auto tensor = static_cast<std::size_t>(piece.tensor - first_tensor);
          const std::int64_t first_element = piece.param_offset + (begin - piece.partition_offset);
          std::span<float> values = out.subspan(static_cast<std::size_t>(begin - range.begin),
                                                static_cast<std::size_t>(end - begin));
          if (pretrained != nullptr) {
            const auto started = std::chrono::steady_clock::now();
            pretrained->read(tensor, first_element, values);
            reading += std::chrono::steady_clock::now() - started;
          } else {
            init_tensor(*specs[tensor], config.strata.seed, static_cast<std::int64_t>(tensor),
                        first_element, values);
          }
        });
  });
  if (pretrained != nullptr)
    base::logger("engine").info("pretrained weights read and widened to fp32 in {:.2f} s",
                                std::chrono::duration<double>(reading).count());
}

}  // namespace strata::engine
