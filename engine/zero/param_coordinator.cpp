#include "engine/zero/param_coordinator.h"

#include <algorithm>
#include <limits>

#include "base/assert.h"
#include "base/log.h"
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
      gathered_(static_cast<std::size_t>(layout.module_count())) {
  STRATA_ASSERT(static_cast<int>(names_.size()) == layout.module_count());
  memory_.set_reclaimer([this] { return drop_one_kept(); });
  STRATA_ASSERT(layout.world_size() == 1 || layout.world_size() == comm.world_size());
}

ParamCoordinator::~ParamCoordinator() {
  memory_.set_reclaimer({});
  for (int m = 0; m < layout_.module_count(); ++m)
    if (gathered_[static_cast<std::size_t>(m)].params) drop(m);
}

void ParamCoordinator::begin_pass(bool training) {
  cursor_ = 0;
  mode_ = training ? training_mode_ : TraceMode::off;
  if (mode_ == TraceMode::record) trace_.clear();
}

void ParamCoordinator::end_step() {
  if (mode_ == TraceMode::record) {
    training_mode_ = TraceMode::follow;
    ++counters_.trace_recordings;
  } else if (mode_ == TraceMode::diverged) {
    training_mode_ = TraceMode::record;
  }
  mode_ = TraceMode::off;
}

std::span<const gpu::Tensor> ParamCoordinator::acquire(int module) {
  if (mode_ == TraceMode::record) {
    trace_.push_back(module);
  } else if (mode_ == TraceMode::follow) {
    if (cursor_ < trace_.size() && trace_[cursor_] == module) {
      ++cursor_;
    } else {
      base::logger("engine").info(
          "module {} ran out of the recorded order (position {} of {}): prefetching stops for "
          "this step and the order is recorded again on the next",
          names_[static_cast<std::size_t>(module)], cursor_, trace_.size());
      mode_ = TraceMode::diverged;
    }
  }
  Gathered& entry = gathered_[static_cast<std::size_t>(module)];
  if (!entry.params) gather(module);
  ++entry.users;
  prefetch_ahead();
  return entry.tensors;
}

void ParamCoordinator::release(int module) {
  Gathered& entry = gathered_[static_cast<std::size_t>(module)];
  STRATA_ASSERT(entry.users > 0);
  if (--entry.users > 0) return;
  if (!options_.release_after_use || persistent(module)) return;
  if (mode_ == TraceMode::follow) {
    const std::int64_t distance = reuse_distance(module, cursor_);
    if (distance >= 0 && distance < options_.max_reuse_distance) return;
  }
  drop(module);
}

void ParamCoordinator::invalidate() {
  for (int m = 0; m < layout_.module_count(); ++m) {
    Gathered& entry = gathered_[static_cast<std::size_t>(m)];
    STRATA_ASSERT(entry.users == 0);
    if (entry.params) drop(m);
  }
}

bool ParamCoordinator::persistent(int module) const {
  return layout_.module(module).numel < options_.persistence_threshold;
}

std::int64_t ParamCoordinator::reuse_distance(int module, std::size_t from) const {
  std::int64_t distance = 0;
  for (std::size_t i = from; i < trace_.size(); ++i) {
    if (trace_[i] == module) return distance;
    distance += layout_.module(trace_[i]).padded_numel;
  }
  return -1;
}

// Over max_live_parameters: drop gathered modules nobody is using (kept for reuse), persistent
// ones last, until the new module fits or nothing more can go.
void ParamCoordinator::make_room(std::int64_t elements) {
  for (bool drop_persistent : {false, true}) {
    for (int m = 0; m < layout_.module_count(); ++m) {
      if (counters_.live_elements + elements <= options_.max_live_parameters) return;
      Gathered& entry = gathered_[static_cast<std::size_t>(m)];
      if (entry.params && entry.users == 0 && (drop_persistent || !persistent(m))) drop(m);
    }
  }
}

bool ParamCoordinator::drop_one_kept() {
  for (bool drop_persistent : {false, true}) {
    int farthest = -1;
    std::int64_t farthest_distance = -1;
    for (int m = 0; m < layout_.module_count(); ++m) {
      const Gathered& entry = gathered_[static_cast<std::size_t>(m)];
      if (!entry.params || entry.users > 0 || (persistent(m) && !drop_persistent)) continue;
      std::int64_t distance = reuse_distance(m, cursor_);
      if (distance < 0) distance = std::numeric_limits<std::int64_t>::max();  // not used again
      if (distance > farthest_distance) {
        farthest = m;
        farthest_distance = distance;
      }
    }
    if (farthest >= 0) {
      drop(farthest);
      return true;
    }
  }
  return false;
}

void ParamCoordinator::gather(int module) {
  const ModuleSlice& slice = layout_.module(module);
  const std::string& name = names_[static_cast<std::size_t>(module)];
  make_room(slice.padded_numel);
  Gathered& entry = gathered_[static_cast<std::size_t>(module)];
  // The layout of stages 0-2 may be unsharded (world 1) while the job has several ranks: then
  // every rank holds the whole module and there is nothing to gather.
  const bool sharded = layout_.world_size() > 1;
  const int rank = sharded ? comm_.rank() : 0;
  const std::int64_t element = gpu::size_bytes(options_.storage);
  // The module stays in the storage type: the ops compute in it (gpu/ops.h), so nothing is
  // widened. The tier's copy into the module's memory runs on the copy stream and waits for that
  // memory's earlier use on this stream, when it is reused.
  std::shared_ptr<gpu::Event> params_released;
  const std::byte* source = tier_.device_shard(module);
  entry.params = memory_.allocate(stream_, slice.padded_numel * element,
                                  name + " gathered parameters", &params_released);
  std::byte* full = entry.params.as<std::byte>();
  try {
    std::byte* own = full + rank * slice.shard_numel * element;
    if (source == nullptr) {
      tier_.fetch(module, stream_, own, params_released.get());
      source = own;
    }
  } catch (...) {
    // A reused buffer may still be read by work queued before it: it goes back in stream order.
    memory_.release(stream_, std::move(entry.params));
    throw;
  }
  if (sharded) {
    comm_.all_gather(stream_, source, full, slice.shard_numel, options_.storage);
  } else if (source != full) {
    stream_.copy(full, source, slice.padded_numel * element, gpu::CopyKind::device_to_device);
  }

  entry.tensors.clear();
  for (const TensorSlot& slot : layout_.tensors(module))
    entry.tensors.push_back(gpu::Tensor(full, options_.storage).at(slot.offset));
  ++counters_.gathers;
  counters_.gathered_elements += slice.padded_numel;
  counters_.live_elements += slice.padded_numel;
  counters_.peak_live_elements = std::max(counters_.peak_live_elements, counters_.live_elements);
}

void ParamCoordinator::drop(int module) {
  Gathered& entry = gathered_[static_cast<std::size_t>(module)];
  memory_.release(stream_, std::move(entry.params));
  entry.tensors.clear();
  counters_.live_elements -= layout_.module(module).padded_numel;
}

void ParamCoordinator::prefetch_ahead() {
  if (mode_ != TraceMode::follow) return;
  std::int64_t elements = 0;
  for (std::size_t i = cursor_; i < trace_.size(); ++i) {
    const int next = trace_[i];
    if (gathered_[static_cast<std::size_t>(next)].params || !tier_.on_nvme(next)) continue;
    elements += layout_.module(next).padded_numel;
    if (elements > options_.prefetch_bucket_size || !tier_.prefetch(next)) return;
  }
}

}  // namespace strata::engine::zero
