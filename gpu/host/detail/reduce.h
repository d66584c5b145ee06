#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/comm.h"

namespace strata::gpu::host::detail {

// The reduction of the host collectives: `target[i]` = op over blocks 0, 1, ..., block_count - 1
// of element i, block b starting at `blocks + b x block_stride_bytes`, each `count` elements of
// `type`. The order is always block 0 first, then 1, 2, ...; floats accumulate in fp32 and 2-byte
// floats round once at the end (see ReduceOp in gpu/comm.h for the exact rules), so the result
// depends on the values only, never on how the collective moved them.
//
// `target` may be one of the blocks (each element is read before it is written), but must not
// overlap a block partially.
void reduce_blocks(DataType type, ReduceOp op, const std::byte* blocks,
                   std::int64_t block_stride_bytes, int block_count, std::int64_t count,
                   void* target);

}  // namespace strata::gpu::host::detail
