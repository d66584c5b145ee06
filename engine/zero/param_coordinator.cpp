#include "engine/zero/param_coordinator.h"

#include <algorithm>
#include <utility>

#include "base/assert.h"
#include "base/log.h"
#include "engine/zero/step_buffers.h"
#include "gpu/stream.h"

namespace strata::engine::zero {

ParamCoordinator::ParamCoordinator(gpu::Ops& ops, gpu::Comm& comm, gpu::Stream& stream,
                                   const FlatLayout& layout, ParamTier& tier,
                                   memory::StreamOrderedMemory& memory,
                                   std::vector<std::string> module_names,
                                   CoordinatorOptions options)
    : ops_(ops),
      comm_(comm),
      stream_(stream),
      layout_(layout),
      tier_(tier),
      memory_(memory),
      names_(std::move(module_names)),
      options_(options),
      gathered_(layout.module_count()),
      policy_(layout, options) {
  STRATA_ASSERT(names_.size() == layout.module_count());
  memory_.set_reclaimer([this] { return drop_one_kept(); });
  STRATA_ASSERT(layout.world_size() == 1 || layout.world_size() == comm.world_size());
}

ParamCoordinator::~ParamCoordinator() {
  memory_.set_reclaimer({});
  // A pass cut short by an exception may leave users behind: the buffers go back all the same.
  for (Gathered& entry : gathered_) {
    if (!entry.params) continue;
    if (entry.uploaded) stream_.wait(*entry.uploaded);
    memory_.release(stream_, std::move(entry.params));
  }
}

void ParamCoordinator::begin_pass(bool training) {
  policy_.begin_pass(training);
}

void ParamCoordinator::end_step() {
  if (policy_.end_step()) ++counters_.trace_recordings;
}

std::span<const gpu::Tensor> ParamCoordinator::acquire(int module) {
  if (!policy_.note_acquire(module)) {
    base::logger("engine").info(
        "module {} ran out of the recorded order (position {} of {}): prefetching stops for "
        "this step and the order is recorded again on the next",
        names_[module], policy_.trace_position(), policy_.trace_length());
  }
  if (!policy_.is_gathered(module)) gather(module, false);
  Gathered& entry = gathered_[module];
  if (!entry.ready) make_ready(module);
  policy_.add_user(module);
  try {
    prefetch_ahead();
  } catch (...) {
    release(module);  // the caller gets no tensors, so it will not release them
    throw;
  }
  return entry.tensors;
}

void ParamCoordinator::release(int module) {
  if (policy_.release(module)) drop(module);
}

void ParamCoordinator::invalidate() {
  for (int m = 0; m < layout_.module_count(); ++m) {
    STRATA_ASSERT(policy_.users(m) == 0);
    if (policy_.is_gathered(m)) drop(m);
  }
}

CoordinatorCounters ParamCoordinator::counters() const {
  CoordinatorCounters counters = counters_;
  counters.live_elements = policy_.live_elements();
  return counters;
}

bool ParamCoordinator::drop_one_kept() {
  const int module = policy_.next_to_reclaim();
  if (module < 0) return false;
  drop(module);
  return true;
}

bool ParamCoordinator::gather(int module, bool ahead) {
  const ModuleSlice& slice = layout_.module(module);
  const std::string& name = names_[module];
  // The last step's optimizer may still be stepping the sub-groups this shard is in. Waiting
  // here, ahead or not, keeps the memory taken the same as in the estimate's counted step, where
  // nothing is stepping.
  tier_.wait_committed(module, stream_);
  for (int evict = policy_.next_to_evict(slice.padded_numel); evict >= 0;
       evict = policy_.next_to_evict(slice.padded_numel))
    drop(evict);
  Gathered& entry = gathered_[module];
  if (tier_.lends()) {
    entry.lent = true;
    ++counters_.lent;
    count_gather(module);
    return true;
  }
  const int rank = layout_.world_size() > 1 ? comm_.rank() : 0;
  const std::int64_t element = gpu::size_bytes(options_.storage);
  // The module stays in the storage type: the ops compute in it (gpu/ops.h), so nothing is
  // widened. The tier's copy into the module's memory runs on the copy stream and waits for that
  // memory's earlier use on this stream, when it is reused.
  std::shared_ptr<gpu::Event> params_released;
  const std::int64_t bytes = slice.padded_numel * element;
  const std::string what = step_buffer_name(StepBuffer::gathered_params, name);
  entry.params = ahead ? memory_.try_allocate(stream_, bytes, what, &params_released)
                       : memory_.allocate(stream_, bytes, what, &params_released);
  if (!entry.params) return false;
  std::byte* own = entry.params.as<std::byte>() + rank * slice.shard_numel * element;
  try {
    if (ahead) {
      entry.uploaded = tier_.upload_ahead(module, own, params_released.get());
    } else if (tier_.device_shard(module) == nullptr) {
      tier_.fetch(module, stream_, own, params_released.get());
    }
  } catch (...) {
    // A reused buffer may still be read by work queued before it: it goes back in stream order.
    memory_.release(stream_, std::move(entry.params));
    throw;
  }
  count_gather(module);
  return true;
}

void ParamCoordinator::count_gather(int module) {
  policy_.mark_gathered(module);
  ++counters_.gathers;
  counters_.gathered_elements += layout_.module(module).padded_numel;
  counters_.peak_live_elements = std::max(counters_.peak_live_elements, policy_.live_elements());
}

void ParamCoordinator::make_ready(int module) {
  const ModuleSlice& slice = layout_.module(module);
  Gathered& entry = gathered_[module];
  if (entry.lent) {
    lend(module);
    return;
  }
  if (entry.uploaded) stream_.wait(*std::exchange(entry.uploaded, nullptr));
  std::byte* full = entry.params.as<std::byte>();
  // Unsharded (stages 0-2 keep every module whole on each rank; or one rank), the shard fetched
  // into `full` is the module. Sharded, the device tier's shard or the one fetched into this
  // rank's place is all-gathered.
  if (layout_.world_size() > 1) {
    const std::int64_t element = gpu::size_bytes(options_.storage);
    const std::byte* source = tier_.device_shard(module);
    if (source == nullptr) source = full + comm_.rank() * slice.shard_numel * element;
    comm_.all_gather(stream_, source, full, slice.shard_numel, options_.storage);
  }
  for (const TensorSlot& slot : layout_.tensors(module))
    entry.tensors.push_back(gpu::Tensor(full, options_.storage).at(slot.offset));
  entry.ready = true;
}

// The tensors of a lent module point into the tier. A tier of the plan alone holds no memory:
// its tensors are null (the estimate's step reads none).
void ParamCoordinator::lend(int module) {
  Gathered& entry = gathered_[module];
  std::byte* memory = tier_.lent_module(module);
  for (const TensorSlot& slot : layout_.tensors(module)) {
    entry.tensors.push_back(memory == nullptr
                                ? gpu::Tensor(nullptr, options_.storage)
                                : gpu::Tensor(memory, options_.storage).at(slot.offset));
  }
  entry.ready = true;
}

void ParamCoordinator::drop(int module) {
  Gathered& entry = gathered_[module];
  entry.lent = false;
  // A copy made ahead may still be writing the memory: the stream waits for it before the
  // memory goes back in its order.
  if (entry.uploaded) stream_.wait(*std::exchange(entry.uploaded, nullptr));
  if (entry.params) memory_.release(stream_, std::move(entry.params));
  entry.tensors.clear();
  entry.ready = false;
  policy_.mark_dropped(module);
}

void ParamCoordinator::prefetch_ahead() {
  // Only a tier on NVMe reads ahead; asking the others would scan the trace for nothing.
  if (tier_.device() == OffloadDevice::nvme) {
    policy_.prefetch_ahead([this](int module) { return tier_.on_nvme(module); },
                           [this](int module) { return tier_.prefetch(module); });
  }
  policy_.gather_ahead([this](int module) { return tier_.in_cpu(module); },
                       [this](int module) { return gather(module, true); });
}

}  // namespace strata::engine::zero
