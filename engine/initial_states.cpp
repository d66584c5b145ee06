// How the engine's states get their values, at start-up and from a checkpoint: range by range,
// straight into the tier that holds them.
#include "engine/initial_states.h"

#include <algorithm>
#include <chrono>

#include "base/assert.h"
#include "base/log.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/shard_pieces.h"
#include "engine/param_init.h"

namespace strata::engine {

std::vector<std::vector<ParamSpec>> declared_parameters(Model& model) {
  std::vector<std::vector<ParamSpec>> specs;
  for (Module* module : model.modules())
    specs.push_back(module->parameters());
  return specs;
}

void fill_states_from(OptimizerStep& optimizer, const StateSource& source) {
  optimizer.fill_states([&](const OptimizerStep::States& states) {
    source(checkpoint::kMasterState, states.range, states.params);
    if (!states.exp_avg.empty()) source(checkpoint::kExpAvgState, states.range, states.exp_avg);
    if (!states.exp_avg_sq.empty())
      source(checkpoint::kExpAvgSqState, states.range, states.exp_avg_sq);
  });
}

void initialise_states(OptimizerStep& optimizer, Model& model, const zero::FlatLayout& layout,
                       std::uint64_t seed, int shard_rank) {
  std::vector<const ParamSpec*> specs;
  const std::vector<std::vector<ParamSpec>> declared = declared_parameters(model);
  for (const std::vector<ParamSpec>& module : declared)
    for (const ParamSpec& spec : module)
      specs.push_back(&spec);
  STRATA_ASSERT(specs.size() == layout.all_tensors().size());
  const std::vector<checkpoint::Piece> pieces = checkpoint::shard_pieces(layout, shard_rank);
  checkpoint::PieceCursor cursor(pieces);
  const zero::TensorSlot* first_tensor = layout.all_tensors().data();
  const WeightSource* pretrained = model.pretrained_weights();
  // How long the weights' reads take of the start-up (the rest is the tiers' filling), logged so
  // that an import can be set beside reading the files alone.
  std::chrono::steady_clock::duration reading{};
  fill_states_from(optimizer, [&](const std::string& state, zero::Range range,
                                  std::span<float> out) {
    std::fill(out.begin(), out.end(), 0.0f);
    if (state != checkpoint::kMasterState) return;
    cursor.for_each_in(range, [&](const checkpoint::Piece& piece, std::int64_t begin,
                                  std::int64_t end) {
      const auto tensor = static_cast<std::size_t>(piece.tensor - first_tensor);
      const std::int64_t first_element = piece.param_offset + (begin - piece.partition_offset);
      std::span<float> values = out.subspan(static_cast<std::size_t>(begin - range.begin),
                                            static_cast<std::size_t>(end - begin));
      if (pretrained != nullptr) {
        const auto started = std::chrono::steady_clock::now();
        pretrained->read(tensor, first_element, values);
        reading += std::chrono::steady_clock::now() - started;
      } else {
        init_tensor(*specs[tensor], seed, static_cast<std::int64_t>(tensor), first_element, values);
      }
    });
  });
  if (pretrained != nullptr)
    base::logger("engine").info("pretrained weights read and widened to fp32 in {:.2f} s",
                                std::chrono::duration<double>(reading).count());
}

}  // namespace strata::engine
