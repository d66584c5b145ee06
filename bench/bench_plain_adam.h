#pragma once

// The comparison for `strata bench adam`: Adam written as a plain C++ loop over the same tiles and
// threads, left to the compiler to vectorise (baseline x86-64, SSE2), with no intrinsics.

#include <cstdint>
#include <span>

#include "cpu_adam/optimizer.h"

namespace strata::tools::bench {

template <class G, class H>
void plain_adam_step(const cpu_adam::AdamConfig& config, std::int64_t step, std::span<float> p,
                     std::span<const G> g, std::span<float> m, std::span<float> v,
                     std::span<H> p_out, float grad_scale);

}  // namespace strata::tools::bench
