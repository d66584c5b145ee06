#pragma once

#include <cstdint>

namespace strata::engine::zero {

// The memory a GradReducer holds for the whole run, from its options and the layout alone
// (GradReducer::plan): the reducer reserves and allocates by it, and the memory estimate prints
// it. The module buffers of stages 2-3, which come and go with each module's backward, are the
// step's, not the plan's.
struct GradReducerPlan {
  // Device memory.
  std::int64_t device_partition_bytes = 0;  // not to_host: the fp32 gradient partition
  std::int64_t full_buffer_bytes = 0;       // stages 0-1: every module's fp32 buffer, all step
  std::int64_t norm_bytes = 0;              // the rank's sum of squares, a double
  std::int64_t module_norm_bytes = 0;       // to_host: each module's sum of squares, a double each

  // Host memory, to_host: one buffer of the pool holds the partition in the gradient type (with
  // to_nvme, kPieceWrites pieces of sums instead) and after it the staging ring.
  std::int64_t piece_elements = 0;      // of the ring's pieces (grad_piece_elements)
  std::int64_t accumulation_bytes = 0;  // the partition, or with to_nvme the piece sums
  std::int64_t staging_bytes = 0;       // kGradStagingSlots pieces of fp32
  std::int64_t read_bytes = 0;          // to_nvme: what grads(range) reads a sub-group into
  std::int64_t swap_bytes = 0;          // to_nvme: the gradient swap file, one extent

  // Page-locked host memory the norm comes down through, before rounding to pages: the rank's
  // sum (and the all-reduce's two floats in the same bytes), and with to_host the modules' sums.
  std::int64_t pinned_norm_bytes = 0;
  std::int64_t pinned_module_norm_bytes = 0;

  std::int64_t host_bytes() const noexcept { return accumulation_bytes + staging_bytes; }
};

}  // namespace strata::engine::zero
