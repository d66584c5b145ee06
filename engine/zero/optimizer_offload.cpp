#include "engine/zero/optimizer_offload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "base/timeline.h"
#include "engine/memory/parallel_copy.h"
#include "engine/zero/sub_group_moves.h"

namespace strata::engine::zero {

OptimizerOffload::OptimizerOffload(const Optimizer& optimizer, OptimizerStates& states,
                                   const OptimizerOffloadOptions& options)
    : optimizer_(optimizer),
      states_(states),
      pipeline_read_(options.pipeline_read),
      pipeline_write_(options.pipeline_write),
      keep_capacity_(options.keep_capacity),
      keep_param_bytes_per_element_(options.keep_param_bytes_per_element) {
  if (keep_capacity_ < 0)
    throw UserError(fmt::format("the optimizer's rollback window is {} sub-groups; it must not be "
                                "negative",
                                keep_capacity_),
                    "set offload_optimizer.buffer_count to 1 or more", 2);
  if (keep_capacity_ > 0) {
    const OptimizerStatesPlan& plan = states_.plan();
    kept_extent_bytes_ = plan.largest_extent_bytes;
    kept_param_bytes_ =
        plan.rollback_slot_bytes(keep_param_bytes_per_element_) - plan.largest_extent_bytes;
    kept_states_ = aio::AlignedBuffer(keep_capacity_ * kept_extent_bytes_);
    kept_params_ = aio::AlignedBuffer(keep_capacity_ * kept_param_bytes_);
  }
}

void OptimizerOffload::step(const StepHyperparameters& hyper, const StepIo& io,
                            const StatesVisitor& stepped) {
  states_.check();
  STRATA_ASSERT(io.grads != nullptr);
  std::vector<int> order(states_.sub_groups().size());
  for (std::size_t g = 0; g < order.size(); ++g)
    order[g] = static_cast<int>(g);
  try {
    if (states_.fills_later() && states_.store()) {
      fill_and_step(hyper, io, stepped);
      return;
    }
    run_step(hyper, io, order, {}, false, stepped);
  } catch (const std::exception& error) {
    throw states_.fail(error, fmt::format("optimizer step {}", hyper.step));
  }
}

void OptimizerOffload::fill_and_step(const StepHyperparameters& hyper, const StepIo& io,
                                     const StatesVisitor& stepped) {
  const auto [fill, finished] = states_.take_later_fill();
  aio::AlignedBuffer scratch_memory = stepped ? states_.states_scratch() : aio::AlignedBuffer();
  const std::span<float> scratch(reinterpret_cast<float*>(scratch_memory.data()),
                                 static_cast<std::size_t>(scratch_memory.size_bytes()) / 4);
  states_.fill_and_write(fill, [&](int g, std::span<std::byte> bytes) {
    compute_into_sink(g, bytes, hyper, io);
    if (stepped) stepped(states_.states_of(g, bytes, scratch));
  });
  if (finished) finished();
}

void OptimizerOffload::step(const StepHyperparameters& hyper, std::span<const float> grads,
                            ParamCopy copy_type, std::span<std::uint16_t> copy) {
  PartitionGrads partition_grads(grads);
  PartitionMemory memory(std::as_writable_bytes(copy), sizeof(std::uint16_t));
  step(hyper, StepIo{&partition_grads, copy_type, copy.empty() ? nullptr : &memory});
}

int OptimizerOffload::step_sub_groups(const StepHyperparameters& hyper, const StepIo& io,
                                      std::span<const int> order, const Ready& ready,
                                      bool keep_prior, const WindingDown& winding_down) {
  states_.check();
  states_.fill_pending();
  STRATA_ASSERT(io.grads != nullptr);
  STRATA_ASSERT(!keep_prior ||
                keep_param_bytes_per_element_ == param_bytes_per_element(io.copy_type));
  STRATA_ASSERT(!keep_prior ||
                static_cast<std::int64_t>(kept_.size() + order.size()) <= keep_capacity_);
  try {
    return run_step(hyper, io, order, Pace{ready, winding_down}, keep_prior, {});
  } catch (const std::exception& error) {
    throw states_.fail(error, fmt::format("optimizer step {}", hyper.step));
  }
}

void OptimizerOffload::compute(int sub_group, std::span<std::byte> bytes,
                               const StepHyperparameters& hyper, const StepIo& io,
                               std::span<std::byte> new_params) {
  const base::Timeline::Scope span("optimizer", "sub-group", std::to_string(sub_group));
  const Range& range = states_.range_of(sub_group);
  const auto size = static_cast<std::size_t>(range.size());
  const OptimizerStates::Regions r = states_.regions(sub_group, bytes);
  const bool copies = io.copy_type != ParamCopy::none && !new_params.empty();
  STRATA_ASSERT(new_params.empty() ||
                new_params.size() ==
                    size * static_cast<std::size_t>(param_bytes_per_element(io.copy_type)));
  // bf16 masters exist only beside a bf16 copy (bf16.enabled), never as fp32 storage.
  STRATA_ASSERT(!states_.types().bf16_master_and_grads || io.copy_type == ParamCopy::bf16);
  const std::span<const std::byte> grads = io.grads->grads(range);
  optimizer_.step(
      hyper, states_.types(), StateArrays{r.params, grads, r.exp_avg, r.exp_avg_sq}, range.size(),
      copies ? io.copy_type : ParamCopy::none,
      copies ? std::span<std::uint16_t>(reinterpret_cast<std::uint16_t*>(new_params.data()), size)
             : std::span<std::uint16_t>());
  if (io.copy_type == ParamCopy::none && !new_params.empty())
    std::memcpy(new_params.data(), r.params.data(), size * sizeof(float));
}

void OptimizerOffload::compute_into_sink(int sub_group, std::span<std::byte> bytes,
                                         const StepHyperparameters& hyper, const StepIo& io) {
  if (io.params == nullptr) {
    compute(sub_group, bytes, hyper, io, {});
    return;
  }
  const Range& range = states_.range_of(sub_group);
  compute(sub_group, bytes, hyper, io, io.params->values(range));
  io.params->commit(range);
}

std::span<std::byte> OptimizerOffload::kept_states(std::size_t slot) {
  return kept_states_.span().subspan(slot * static_cast<std::size_t>(kept_extent_bytes_),
                                     static_cast<std::size_t>(kept_extent_bytes_));
}

// Slot `slot`'s new parameters of `sub_group`, waiting for commit_kept.
std::span<std::byte> OptimizerOffload::kept_new_params(std::size_t slot, int sub_group) {
  const Range& range = states_.range_of(sub_group);
  return kept_params_.span().subspan(
      slot * static_cast<std::size_t>(kept_param_bytes_),
      static_cast<std::size_t>(range.size() * keep_param_bytes_per_element_));
}

std::size_t OptimizerOffload::keep(int sub_group, std::span<const std::byte> bytes) {
  const std::size_t slot = kept_.size();
  STRATA_ASSERT(static_cast<std::int64_t>(slot) < keep_capacity_);
  STRATA_ASSERT(static_cast<std::int64_t>(bytes.size()) <= kept_extent_bytes_);
  memory::copy_in_parallel(kept_states(slot).first(bytes.size()), bytes);
  kept_.push_back(sub_group);
  return slot;
}

void OptimizerOffload::commit_kept(const StepIo& io) {
  if (io.params != nullptr) {
    for (std::size_t slot = 0; slot < kept_.size(); ++slot) {
      const Range& range = states_.range_of(kept_[slot]);
      std::span<const std::byte> values = kept_new_params(slot, kept_[slot]);
      std::span<std::byte> target = io.params->values(range);
      memory::copy_in_parallel(target.first(values.size()), values);
      io.params->commit(range);
    }
  }
  kept_.clear();
}

void OptimizerOffload::undo_kept(const StepHyperparameters* redo, const StepIo& io) {
  states_.check();
  try {
    for (std::size_t slot = 0; slot < kept_.size(); ++slot) {
      const int g = kept_[slot];
      const memory::PartitionId id = states_.partition(g);
      memory::Residency& book = states_.book();
      const auto bytes = static_cast<std::size_t>(book.bytes(id));
      if (!states_.store()) {
        memory::Residency::CpuView view = book.view(id);
        memory::copy_in_parallel(view.bytes().first(bytes), kept_states(slot).first(bytes));
        if (redo != nullptr) compute_into_sink(g, view.bytes(), *redo, io);
        continue;
      }
      // The extent holds the step being undone: the prior value (redone or not) replaces it.
      memory::Residency::CpuView view = book.replace(id, kept_states(slot).first(bytes));
      if (redo != nullptr) compute_into_sink(g, view.bytes(), *redo, io);
      book.finish_write(book.begin_write(std::move(view)));
    }
  } catch (const std::exception& error) {
    kept_.clear();
    throw states_.fail(error, "undoing an overlapped optimizer step");
  }
  kept_.clear();
}

int OptimizerOffload::run_step(const StepHyperparameters& hyper, const StepIo& io,
                               std::span<const int> order, const Pace& pace, bool keep_prior,
                               const StatesVisitor& visit) {
  // bf16 states reach `visit` widened, through one sub-group of fp32 scratch.
  aio::AlignedBuffer scratch_memory = visit ? states_.states_scratch() : aio::AlignedBuffer();
  const std::span<float> scratch(reinterpret_cast<float*>(scratch_memory.data()),
                                 static_cast<std::size_t>(scratch_memory.size_bytes()) / 4);
  // A kept sub-group's new parameters wait in its slot; the others go to the sink now.
  const StepOne step_one = [&](int g, std::span<std::byte> bytes) {
    if (keep_prior) {
      const std::size_t slot = keep(g, bytes);
      compute(g, bytes, hyper, io,
              io.params == nullptr ? std::span<std::byte>() : kept_new_params(slot, g));
    } else {
      compute_into_sink(g, bytes, hyper, io);
    }
    if (visit) visit(states_.states_of(g, bytes, scratch));
  };
  if (states_.store()) return run_step_from_nvme(order, pace, step_one);
  int stepped = 0;
  for (int g : order) {
    if ((pace.winding_down && pace.winding_down()) || (pace.ready && !pace.ready(g))) break;
    memory::Residency::CpuView view = states_.book().view(states_.partition(g));
    step_one(g, view.bytes());
    ++stepped;
  }
  return stepped;
}

namespace {

// The pool buffers and moves of one step on NVMe: reads run ahead of the sub-group being
// computed, writes behind it.
class StepMoves {
 public:
  StepMoves(memory::PinnedPool& pool, memory::PinnedPool::Shelf shelf, memory::Residency& book)
      : pool_(pool), shelf_(shelf), book_(book) {}
  // A buffer: a free one, else (when `wait_for_write`) the one of the oldest write once it is
  // done, else (when `must`) the next one given back.
  memory::PinnedPool::Lease buffer(bool wait_for_write, bool must) {
    memory::PinnedPool::Lease lease = pool_.try_acquire(shelf_);
    if (!lease && wait_for_write && !writes.empty()) {
      InFlight oldest = std::move(writes.front());
      writes.pop_front();
      book_.finish_write(std::move(oldest.move));
      lease = std::move(oldest.lease);
    }
    if (!lease && must) lease = pool_.acquire(shelf_);
    return lease;
  }
  void issue_read(int sub_group, memory::PartitionId id, memory::PinnedPool::Lease lease) {
    memory::Residency::Move move = book_.begin_read(id, lease.bytes());
    reads.push_back({sub_group, std::move(lease), std::move(move)});
  }
  // Stopped: the sub-groups read ahead are unchanged, so their extents still hold them.
  void drop_reads() {
    while (!reads.empty()) {
      InFlight read = std::move(reads.front());
      reads.pop_front();
      book_.drop_clean(book_.finish_read(std::move(read.move)));
    }
  }
  void finish_writes() {
    while (!writes.empty()) {
      InFlight oldest = std::move(writes.front());
      writes.pop_front();
      book_.finish_write(std::move(oldest.move));
    }
  }
  // After an error: what is still in flight is waited for, its own errors dropped.
  void drain() {
    drain_reads(book_, reads);
    drain_writes(book_, writes);
  }
  std::int64_t in_flight() const { return static_cast<std::int64_t>(reads.size() + writes.size()); }

  std::deque<InFlight> reads;
  std::deque<InFlight> writes;

 private:
  memory::PinnedPool& pool_;
  memory::PinnedPool::Shelf shelf_;
  memory::Residency& book_;
};

}  // namespace

int OptimizerOffload::run_step_from_nvme(std::span<const int> order, const Pace& pace,
                                         const StepOne& step_one) {
  memory::Residency& book = states_.book();
  StepMoves moves(*states_.pool(), states_.shelf(), book);
  const int n = static_cast<int>(order.size());
  // How far reads run ahead of the sub-group being computed: every buffer not needed by the
  // current sub-group and, with pipeline_write, by the one being written.
  const std::int64_t count = states_.pool()->buffer_count(states_.shelf());
  const std::int64_t ahead =
      pipeline_read_ ? std::max<std::int64_t>(1, count - 1 - (pipeline_write_ ? 1 : 0)) : 0;
  const auto winding_down = [&] { return pace.winding_down && pace.winding_down(); };
  int next_read = 0;  // index into order
  int stepped = 0;
  auto issue_read = [&](memory::PinnedPool::Lease lease) {
    const int g = order[static_cast<std::size_t>(next_read++)];
    moves.issue_read(g, states_.partition(g), std::move(lease));
  };
  peak_in_flight_ = 0;
  try {
    for (int i = 0; i < n; ++i) {
      const int g = order[static_cast<std::size_t>(i)];
      if (moves.reads.empty()) {
        if (winding_down()) break;  // nothing read ahead is left to step
        issue_read(moves.buffer(true, true));
      }
      while (next_read < n && next_read <= i + ahead && !winding_down()) {
        memory::PinnedPool::Lease lease = moves.buffer(next_read == i + 1, false);
        if (!lease) break;
        issue_read(std::move(lease));
      }
      peak_in_flight_ = std::max(peak_in_flight_, moves.in_flight());
      if (pace.ready && !pace.ready(g)) {
        moves.drop_reads();
        break;
      }
      InFlight current = std::move(moves.reads.front());
      moves.reads.pop_front();
      STRATA_ASSERT(current.sub_group == g);
      memory::Residency::CpuView view = book.finish_read(std::move(current.move));
      step_one(g, view.bytes());
      ++stepped;
      current.move = book.begin_write(std::move(view));
      if (pipeline_write_) {
        moves.writes.push_back(std::move(current));
      } else {
        book.finish_write(std::move(current.move));
      }
    }
    moves.finish_writes();
  } catch (...) {
    moves.drain();
    throw;
  }
  return stepped;
}

}  // namespace strata::engine::zero
