#include "gpu/host/kernels/cast.h"

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {
namespace {

constexpr std::int64_t cast_grain = 65536;

// `convert` is a lambda, not a function pointer, so that the loop inlines it and vectorises.
template <typename Target, typename Source, typename Convert>
void cast_array(Target* target, const Source* source, std::int64_t n, Convert convert) {
  STRATA_ASSERT(n >= 0);
  STRATA_ASSERT(n == 0 || (target != nullptr && source != nullptr));
  detail::parallel_chunks(n, cast_grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      target[i] = convert(source[i]);
  });
}

}  // namespace

void cast_fp32_to_bf16(std::uint16_t* target, const float* source, std::int64_t n) {
  cast_array(target, source, n, [](auto value) { return float_to_bf16(value); });
}

void cast_bf16_to_fp32(float* target, const std::uint16_t* source, std::int64_t n) {
  cast_array(target, source, n, [](auto value) { return bf16_to_float(value); });
}

void cast_fp32_to_fp16(std::uint16_t* target, const float* source, std::int64_t n) {
  cast_array(target, source, n, [](auto value) { return float_to_fp16(value); });
}

void cast_fp16_to_fp32(float* target, const std::uint16_t* source, std::int64_t n) {
  cast_array(target, source, n, [](auto value) { return fp16_to_float(value); });
}

}  // namespace strata::gpu::host::kernels
