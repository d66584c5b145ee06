#include "engine/param_storage.h"

#include <cstring>

#include "cpu_adam/half.h"
#include "engine/model.h"

namespace strata::engine {

ParamCopy storage_type(const Config& config) {
  if (config.bf16.enabled) return ParamCopy::bf16;
  if (config.fp16.enabled) return ParamCopy::fp16;
  return ParamCopy::none;
}

void to_storage(ParamCopy copy, std::span<const float> values, std::byte* out) {
  if (copy == ParamCopy::none) {
    std::memcpy(out, values.data(), values.size_bytes());
    return;
  }
  auto* bits = reinterpret_cast<std::uint16_t*>(out);
  for (std::size_t i = 0; i < values.size(); ++i)
    bits[i] = copy == ParamCopy::bf16 ? cpu_adam::to_bf16(values[i]).bits
                                      : cpu_adam::to_fp16(values[i]).bits;
}

gpu::DataType compute_type(const Config& config) {
  return to_data_type(storage_type(config));
}

gpu::DataType to_data_type(ParamCopy copy) {
  switch (copy) {
    case ParamCopy::none:
      break;
    case ParamCopy::bf16:
      return gpu::DataType::bfloat16;
    case ParamCopy::fp16:
      return gpu::DataType::float16;
  }
  return gpu::DataType::float32;
}

}  // namespace strata::engine
