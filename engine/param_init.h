#pragma once

#include <cstdint>
#include <span>

#include "engine/param_spec.h"

namespace strata::engine {

// Fills `values` with the initial values of tensor number `tensor_index` of the model (its
// position in declaration order across all modules). Each element's value is a pure function
// of (seed, tensor_index, element index), so every layout, sharding and world size starts from
// the same bits, and a rank can initialise its own shard without the rest.
// `first_element` is the index within the tensor of values[0]. The padded rows of a table
// (ParamSpec::unpadded_rows) are zero whatever `init` says.
void init_tensor(const ParamSpec& spec, std::uint64_t seed, std::int64_t tensor_index,
                 std::int64_t first_element, std::span<float> values);

}  // namespace strata::engine
