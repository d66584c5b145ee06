#include "engine/param_init.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace strata::engine {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A standard normal from two counter-derived uniforms (Box-Muller), in double so the float that
// results is the same on every machine.
double normal(std::uint64_t key) {
  double u1 = (static_cast<double>(mix(key) >> 11) + 0.5) * 0x1p-53;
  double u2 = static_cast<double>(mix(key ^ 0xD1B54A32D192ED03ull) >> 11) * 0x1p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

void init_tensor(const ParamSpec& spec, std::uint64_t seed, std::int64_t tensor_index,
                 std::int64_t first_element, std::span<float> values) {
  // values[i] is element first_element + i: those from `unpadded` on are the padded rows.
  const std::int64_t unpadded = spec.unpadded_numel() - first_element;
  const std::size_t drawn =
      static_cast<std::size_t>(std::clamp<std::int64_t>(unpadded, 0, std::ssize(values)));
  std::fill(values.begin() + static_cast<std::ptrdiff_t>(drawn), values.end(), 0.0f);
  values = values.first(drawn);
  switch (spec.init) {
    case ParamInit::zeros:
      for (float& value : values)
        value = 0.0f;
      return;
    case ParamInit::ones:
      for (float& value : values)
        value = 1.0f;
      return;
    case ParamInit::normal: {
      // Each element on its own (a few dozen ns of log, sqrt and cos): spread over the cores, so
      // that a model of billions of parameters starts in seconds, not minutes.
      const std::uint64_t tensor_key = mix(seed ^ mix(static_cast<std::uint64_t>(tensor_index)));
      tbb::parallel_for(
          tbb::blocked_range<std::size_t>(0, values.size(), std::size_t{1} << 14),
          [&](const tbb::blocked_range<std::size_t>& block) {
            for (std::size_t i = block.begin(); i != block.end(); ++i) {
              auto element = static_cast<std::uint64_t>(first_element) + i;
              values[i] = static_cast<float>(spec.init_std * normal(tensor_key ^ mix(element)));
            }
          });
      return;
    }
  }
}

}  // namespace strata::engine
