#include "engine/param_init.h"

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
      std::uint64_t tensor_key = mix(seed ^ mix(static_cast<std::uint64_t>(tensor_index)));
      for (std::size_t i = 0; i < values.size(); ++i) {
        auto element = static_cast<std::uint64_t>(first_element) + i;
        values[i] = static_cast<float>(spec.init_std * normal(tensor_key ^ mix(element)));
      }
      return;
    }
  }
}

}  // namespace strata::engine
