#include "engine/offloaded_optimizer_step.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "base/log.h"
#include "engine/optim/grad_clip.h"
#include "engine/param_storage.h"
#include "engine/zero/offload_options.h"

namespace strata::engine {
namespace {

// The rollback window of an overlapped step: as many sub-groups as the swap buffers hold, at
// most all of them. A partition of one sub-group is final only when backward ends, so nothing
// can overlap: said once, with the key that fixes it.
std::int64_t overlap_window(const zero::OptimizerOffloadOptions& options, std::int64_t partition,
                            int rank) {
  const auto sub_groups = static_cast<std::int64_t>(options.sub_groups.size());
  if (sub_groups == 1 && rank == 0) {
    base::logger("engine").warn(
        "strata.overlap_optimizer has nothing to overlap: the rank's optimizer partition ({} "
        "elements) is one sub-group, final only when backward ends; set "
        "zero_optimization.sub_group_size below it (e.g. {}) to step sub-groups during backward",
        partition, std::max<std::int64_t>(1, partition / 8));
  }
  return std::min(options.buffer_count, sub_groups);
}

}  // namespace

OffloadedOptimizerStep::Options OffloadedOptimizerStep::options_for(
    const Config& config, const Runtime& runtime, const zero::FlatLayout& layout,
    std::vector<zero::Range> sub_groups, memory::PinnedPool* pool, memory::Residency* book,
    memory::NvmeStore* store) {
  Options options;
  options.offload = zero::optimizer_offload_options(config, runtime.comm.rank());
  options.offload.nvme.faults = runtime.faults.swap;
  options.offload.pool = pool;
  options.offload.book = book;
  options.offload.store = store;
  options.offload.sub_groups = std::move(sub_groups);
  // A step the gradients cannot change is known before backward: all of it overlaps, with
  // nothing kept to undo.
  options.fixed =
      !optim::gradients_can_change_the_step(config.gradient_clipping, config.fp16, config.bf16);
  options.overlap = config.strata.overlap_optimizer;
  options.window = options.overlap ? overlap_window(options.offload, layout.partition_numel(),
                                                    runtime.comm.rank())
                                   : 0;
  if (options.overlap && !options.fixed) {
    options.offload.keep_capacity = options.window;
    // io() hands one copy, the storage's.
    options.offload.keep_param_bytes_per_element =
        gpu::size_bytes(to_data_type(storage_type(config)));
  }
  return options;
}

OffloadedOptimizerStep::OffloadedOptimizerStep(const Optimizer& optimizer,
                                               const zero::FlatLayout& layout, ParamCopy copy_type,
                                               zero::ParamTier& tier, Options options)
    : layout_(layout),
      copy_type_(copy_type),
      tier_(tier),
      overlap_(options.overlap),
      fixed_(options.fixed),
      window_(options.window) {
  states_ =
      std::make_unique<zero::OptimizerStates>(optimizer, layout.partition_numel(), options.offload);
  offload_ = std::make_unique<zero::OptimizerOffload>(optimizer, *states_, options.offload);
  late_ = std::make_unique<zero::LateSubGroups>(*offload_);
}

// The overlapped step's thread steps a sub-group once the reducer's queue has landed its
// gradients.
void OffloadedOptimizerStep::connect(zero::GradReducer& reducer) {
  reducer_ = &reducer;
  if (!overlap_) return;
  overlapped_ = std::make_unique<zero::OverlappedStep>(
      reducer.reductions(), layout_, *offload_, window_,
      fixed_ ? zero::OverlappedStep::Guess::fixed : zero::OverlappedStep::Guess::may_change);
}

void OffloadedOptimizerStep::begin_backward(const StepHyperparameters& guess) {
  if (overlapped_) overlapped_->begin(guess, io());
}

void OffloadedOptimizerStep::module_final(int module) {
  if (overlapped_) overlapped_->module_final(module, reducer_->reductions().last());
}

std::optional<std::vector<int>> OffloadedOptimizerStep::finish_overlapped(
    const StepHyperparameters& hyper, StepStats& stats) {
  zero::OverlapOutcome outcome = overlapped_->finish(stats.skipped ? nullptr : &hyper);
  stats.early_sub_groups = outcome.early_sub_groups;
  stats.undone_sub_groups = outcome.undone ? outcome.early_sub_groups : 0;
  if (stats.skipped) return std::nullopt;  // the parameter tier was not changed
  return std::move(outcome.unreached);
}

// Every sub-group is left to the next forward unless the step saves a planned checkpoint or
// fills states from one as it goes: then it runs now.
bool OffloadedOptimizerStep::step(const StepHyperparameters& hyper, StepStats& stats,
                                  const StatesVisitor& save) {
  std::optional<std::vector<int>> left;
  if (overlapped_) {
    left = finish_overlapped(hyper, stats);
  } else if (stats.skipped) {
    return false;
  } else if (!save && !states_->fills_later()) {
    left.emplace(states_->sub_groups().size());
    std::iota(left->begin(), left->end(), 0);
  } else {
    offload_->step(hyper, io(), save);
  }
  if (!left) return false;
  stats.late_sub_groups = static_cast<std::int64_t>(left->size());
  late_hyper_ = hyper;
  late_order_ = std::move(*left);
  return true;
}

void OffloadedOptimizerStep::start_late() {
  late_->start(late_hyper_, io(), std::exchange(late_order_, {}));
}

bool OffloadedOptimizerStep::abandon() noexcept {
  // The last step's sub-groups still being stepped complete that step (or fail, which leaves
  // the optimizer inconsistent and is said by the caller).
  late_->abandon();
  if (!overlapped_) return false;
  const bool was_consistent = !states_->inconsistent();
  overlapped_->abandon();
  return was_consistent && states_->inconsistent();
}

// Sub-group by sub-group (through the swap buffers on NVMe); each one's masters, in the storage
// type, go to the parameter tier.
void OffloadedOptimizerStep::fill_states(const StatesVisitor& fill) {
  states_->fill_states([&](const States& states) {
    fill(states);
    to_storage(copy_type_, states.params, tier_.values(states.range).data());
    tier_.commit(states.range);
  });
}

void OffloadedOptimizerStep::fill_states_later(StatesVisitor fill, std::function<void()> finished) {
  STRATA_ASSERT(streams_states());
  states_->fill_states_later(std::move(fill), std::move(finished));
}

Traffic OffloadedOptimizerStep::moved() const {
  const memory::ResidencyCounters states = states_->counters();
  Traffic traffic;
  traffic.nvme_read = states.moved(memory::Direction::nvme_read);
  traffic.nvme_write = states.moved(memory::Direction::nvme_write);
  return traffic;
}

}  // namespace strata::engine
