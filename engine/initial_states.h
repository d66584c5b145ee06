#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/optimizer_step.h"
#include "engine/param_spec.h"
#include "engine/zero/flat_layout.h"

namespace strata::engine {

// Every module's parameters, in module order.
std::vector<std::vector<ParamSpec>> declared_parameters(Model& model);

// Where each state's values come from, range by range in partition order: the seed's initial
// values, or a checkpoint. `state` is one of the checkpoint's state names.
using StateSource =
    std::function<void(const std::string& state, zero::Range range, std::span<float> out)>;

// The optimizer's states from `source`, straight into the tier that holds them (so that no step
// of the engine's life holds a whole partition in CPU memory, docs/memory.md); their masters go
// on to the parameter tier.
void fill_states_from(OptimizerStep& optimizer, const StateSource& source);

// The initial values: the model's pretrained weights when it brings them, else the seed's (every
// element of a tensor a pure function of (seed, tensor, element), engine/param_init.h); each
// range is made on its own, whatever the layout; the padding and the gaps between tensors are
// zero, and so are the optimizer's moments.
void initialise_states(OptimizerStep& optimizer, Model& model, const zero::FlatLayout& layout,
                       std::uint64_t seed, int shard_rank);

}  // namespace strata::engine
