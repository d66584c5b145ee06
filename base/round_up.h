#pragma once

#include <cstdint>

namespace strata::base {

// `value` rounded up to a multiple of `multiple` (> 0): a size in whole blocks, pages or
// alignment units. `value` >= 0.
constexpr std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace strata::base
