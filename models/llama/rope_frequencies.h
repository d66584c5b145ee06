#pragma once

#include <cstdint>
#include <vector>

#include "models/hf/hf_config.h"

namespace strata::models {

// The rotary embedding's inverse frequencies, head_dim / 2 of them, as transformers computes them
// in fp32: 1 / theta^(2j / head_dim) (_compute_default_rope_parameters), then, for rope type
// llama3, low frequencies divided by `factor`, high ones kept, and the band between blended
// (_compute_llama3_parameters).
std::vector<float> rope_inverse_frequencies(const RopeConfig& rope, std::int64_t head_dim);

}  // namespace strata::models
