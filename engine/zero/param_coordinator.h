#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/by_index.h"
#include "engine/memory/stream_ordered_memory.h"
#include "engine/module.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/gather_policy.h"
#include "engine/zero/param_tier.h"
#include "gpu/comm.h"
#include "gpu/device.h"
#include "gpu/ops.h"

namespace strata::engine::zero {

// The gather policy's rules and the type the modules are gathered in.
struct CoordinatorOptions : GatherRules {
  gpu::DataType storage = gpu::DataType::bfloat16;  // the shards' type: float32, bfloat16, float16
};

// Traffic and residency, for the step's metrics and the tests.
struct CoordinatorCounters {
  std::int64_t gathers = 0;            // modules gathered (or lent: ParamTier::lends())
  std::int64_t lent = 0;               // of them, read in place from the tier: nothing copied
  std::int64_t gathered_elements = 0;  // their padded elements
  std::int64_t live_elements = 0;      // gathered elements now on the device
  std::int64_t peak_live_elements = 0;
  std::int64_t trace_recordings = 0;  // times the module order was (re-)recorded
};

// The parameter coordinator (docs/architecture.md, "One training step", 1 and 2): before a
// module runs, its shard is fetched from the parameter tier and all-gathered across ranks, in the
// storage type the ops compute in (fp32, bf16 or fp16); after, the gathered copy is released unless
// persistent or reused soon. The first training step records the order modules are acquired in (the
// trace); later steps prefetch the modules next in the trace, stage3_prefetch_bucket_size elements
// ahead, while earlier ones compute: shards in CPU memory are copied to their device memory on the
// copy stream (the compute stream waits only for the copy's event, when the module is acquired),
// and shards on NVMe are read into the tier's buffers. A step whose order departs from the trace
// stops prefetching, and the next step records anew. A tier that lends its modules
// (ParamTier::lends(): the device tier of an unsharded layout) is read in place: no memory, no
// copy, the same values. What to keep, drop and prefetch is the
// GatherPolicy's decision; the coordinator does the device work and holds the memory. The memory
// estimate runs this class itself, on a counting device over a tier of the plan alone, for the
// step's device peak (engine/memory_estimate.cpp).
//
// All device work goes on `stream` in order; not thread-safe.
class ParamCoordinator {
 public:
  ParamCoordinator(gpu::Ops& ops, gpu::Comm& comm, gpu::Stream& stream, const FlatLayout& layout,
                   ParamTier& tier, memory::StreamOrderedMemory& memory,
                   std::vector<std::string> module_names, CoordinatorOptions options);
  ~ParamCoordinator();
  ParamCoordinator(const ParamCoordinator&) = delete;
  ParamCoordinator& operator=(const ParamCoordinator&) = delete;

  // Starts a pass over the modules: training passes follow (or record) the trace, evaluation
  // passes neither read nor change it.
  void begin_pass(bool training);
  // Ends a training step: a recording trace becomes the one to follow.
  void end_step();

  // Makes module `module`'s parameters live on the device in the storage type (gathered in
  // stream order) and returns its tensors; counts one user until release().
  std::span<const gpu::Tensor> acquire(int module);
  void release(int module);
  // The parameters changed (an optimizer step): every gathered copy is stale and is dropped.
  void invalidate();

  CoordinatorCounters counters() const;

 private:
  struct Gathered {
    gpu::DeviceBuffer params;  // the storage type, padded_numel; none when lent
    bool lent = false;         // the tensors point into the tier's own memory
    std::vector<gpu::Tensor> tensors;
    bool ready = false;  // make_ready ran: the stream may read `params` through `tensors`
    // Gathered ahead of use: the shard's copy into `params`, which the stream has not waited for
    // yet (null once it has, or for a module gathered at its acquire).
    std::shared_ptr<gpu::Event> uploaded;
  };
  // Takes the module's memory and fills its own shard: at once on the stream, or with `ahead`
  // only by the tier's copy on the copy stream (Gathered::uploaded), and only when there is
  // memory for it now (false when not: a prefetch is left undone rather than make room).
  bool gather(int module, bool ahead);
  // The stream waits for a copy made ahead, all-gathers the module and points its tensors at it.
  void make_ready(int module);
  void lend(int module);
  void count_gather(int module);  // the policy and the counters, once the module is live
  void drop(int module);
  void prefetch_ahead();
  // The memory's reclaimer: drops the module the policy gives up first; false when there is none.
  bool drop_one_kept();

  gpu::Ops& ops_;
  gpu::Comm& comm_;
  gpu::Stream& stream_;
  const FlatLayout& layout_;
  ParamTier& tier_;
  memory::StreamOrderedMemory& memory_;
  base::ByIndex<std::string> names_;
  CoordinatorOptions options_;
  base::ByIndex<Gathered> gathered_;
  GatherPolicy policy_;
  CoordinatorCounters counters_;
};

}  // namespace strata::engine::zero
