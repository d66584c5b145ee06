#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/engine.h"
#include "engine/optimizer.h"
#include "engine/optimizer_step.h"
#include "engine/zero/late_sub_groups.h"
#include "engine/zero/optimizer_offload.h"
#include "engine/zero/overlapped_step.h"
#include "engine/zero/param_tier.h"
#include "engine/zero/step_io.h"

namespace strata::engine {

// The optimizer offloaded to CPU memory or NVMe (docs/zero.md): zero::OptimizerStates holds the
// states, zero::OptimizerOffload steps them sub-group by sub-group on its threads. With
// strata.overlap_optimizer the sub-groups backward makes final are stepped beside it
// (zero::OverlappedStep), kept until the real step is known; the sub-groups left after backward are
// stepped beside the next forward (zero::LateSubGroups), unless the step saves a checkpoint or
// reads loaded states as it goes.
class OffloadedOptimizerStep final : public OptimizerStep {
 public:
  struct Options {
    // Pool, book, store and sub-groups set; keep_capacity for an overlapped step that may be
    // undone.
    zero::OptimizerOffloadOptions offload;
    bool overlap = false;  // strata.overlap_optimizer
    // The gradients cannot change the step (no clipping, no overflow check): the guess made
    // before backward is the step.
    bool fixed = false;
    std::int64_t window = 0;  // sub-groups an overlapped step keeps to undo
  };
  // The options the config asks for on `rank`, in the pool, book and store given (store null
  // without the states on NVMe).
  static Options options_for(const Config& config, const Runtime& runtime,
                             const zero::FlatLayout& layout, std::vector<zero::Range> sub_groups,
                             memory::PinnedPool* pool, memory::Residency* book,
                             memory::NvmeStore* store);

  OffloadedOptimizerStep(const Optimizer& optimizer, const zero::FlatLayout& layout,
                         ParamCopy copy_type, zero::ParamTier& tier, Options options);

  void connect(zero::GradReducer& reducer) override;
  void open() override { states_->open(); }
  void settle_late() override { late_->settle(); }
  void begin_backward(const StepHyperparameters& guess) override;
  void module_final(int module) override;
  bool step(const StepHyperparameters& hyper, StepStats& stats, const StatesVisitor& save) override;
  void start_late() override;
  bool abandon() noexcept override;
  void abandon_late() noexcept override { late_->abandon(); }

  void fill_states(const StatesVisitor& fill) override;
  void visit_states(const StatesVisitor& visit) override { states_->visit_states(visit); }
  void read_masters(std::span<float> out) override { states_->read_states(out, {}, {}); }
  bool streams_states() const override { return states_->store() != nullptr && !overlap_; }
  void fill_states_later(StatesVisitor fill, std::function<void()> finished) override;
  bool fills_later() const override { return states_->fills_later(); }
  const std::vector<zero::Range>& sub_groups() const override { return states_->sub_groups(); }

  bool inconsistent() const override { return states_->inconsistent(); }
  Traffic moved() const override;
  std::int64_t nvme_bytes() const override { return states_->nvme_bytes(); }
  std::int64_t host_bytes() const override { return offload_->rollback_bytes(); }

 private:
  // What the optimizer reads (the reducer's gradients, in CPU memory or its swap file) and where
  // its new parameters go (the tier, sub-group by sub-group, in the storage type).
  zero::StepIo io() const { return zero::StepIo{reducer_, copy_type_, &tier_}; }
  // The end of a step overlapped with backward: its early sub-groups stand or are undone.
  // Returns the sub-groups the thread did not reach (none for a skipped step: nullopt).
  std::optional<std::vector<int>> finish_overlapped(const StepHyperparameters& hyper,
                                                    StepStats& stats);

  const zero::FlatLayout& layout_;
  ParamCopy copy_type_;
  zero::ParamTier& tier_;
  zero::GradReducer* reducer_ = nullptr;
  bool overlap_;
  bool fixed_;
  std::int64_t window_;
  std::unique_ptr<zero::OptimizerStates> states_;
  std::unique_ptr<zero::OptimizerOffload> offload_;   // steps states_
  std::unique_ptr<zero::OverlappedStep> overlapped_;  // with strata.overlap_optimizer
  // After overlapped_: it reads what the states, the reducer and the tier hold, and goes first.
  std::unique_ptr<zero::LateSubGroups> late_;
  // What step() left for start_late().
  StepHyperparameters late_hyper_;
  std::vector<int> late_order_;
};

}  // namespace strata::engine
