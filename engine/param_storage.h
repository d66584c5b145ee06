#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/config/config.h"
#include "engine/optimizer.h"
#include "gpu/comm.h"

namespace strata::engine {

// The optimizer's states move between host and device memory (a checkpoint's save and load,
// start-up) in chunks of this many elements.
inline constexpr std::int64_t kStateChunk = std::int64_t{1} << 20;

// The 16-bit copy of the parameters the config asks for (bf16, fp16), or none for fp32.
ParamCopy storage_type(const Config& config);
gpu::DataType to_data_type(ParamCopy copy);
// `values` in the storage type of `copy` (fp32 as they are), at `out`.
void to_storage(ParamCopy copy, std::span<const float> values, std::byte* out);

}  // namespace strata::engine
