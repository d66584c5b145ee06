// aio (deepspeed/runtime/swap_tensor/aio_config.py) plus strata's own `verify`.
#include <fmt/format.h>

#include "engine/config/sections.h"

namespace strata::engine::detail {

void read_aio(JsonReader& top, AioConfig& out) {
  JsonReader aio(top.find("aio"), "aio", top.diagnostics());
  // DeepSpeed renamed thread_count to intra_op_parallelism (PR #7056) and now ignores the old
  // name silently; strata reads both.
  aio.alias("intra_op_parallelism", "thread_count");
  // O_DIRECT needs requests aligned to the logical block size; 4 KiB covers every NVMe drive.
  if (aio.read("block_size", out.block_size, IntRange{4096, std::int64_t{1} << 30}) &&
      out.block_size % 4096 != 0) {
    aio.error("block_size", fmt::format("got {}, expected a multiple of 4096 (O_DIRECT requests "
                                        "must be aligned to the disk's 4 KiB blocks), e.g. 1048576",
                                        out.block_size));
  }
  aio.read("queue_depth", out.queue_depth, IntRange{1, 32768});  // io_uring's ring limit
  aio.read("intra_op_parallelism", out.intra_op_parallelism, IntRange{1, 256});
  aio.read("single_submit", out.single_submit);
  aio.read("overlap_events", out.overlap_events);
  aio.read("use_gds", out.use_gds);
  if (out.use_gds)
    aio.unsupported("use_gds", "GPUDirect Storage",
                    "set it to false; strata reads NVMe into pinned CPU buffers with io_uring");
  aio.read("verify", out.verify);
  aio.finish();
}
}  // namespace strata::engine::detail
