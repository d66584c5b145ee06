#include "engine/zero/gather_policy.h"

#include <algorithm>
#include <limits>

#include "base/assert.h"

namespace strata::engine::zero {

GatherRules gather_rules(int stage, std::int64_t persistence_threshold,
                         std::int64_t max_reuse_distance, std::int64_t prefetch_bucket_size,
                         std::int64_t max_live_parameters) {
  GatherRules rules;
  rules.release_after_use = stage == 3;
  rules.persistence_threshold = persistence_threshold;
  rules.max_reuse_distance = max_reuse_distance;
  rules.prefetch_bucket_size = prefetch_bucket_size;
  // Below stage 3 every module stays gathered: no bound on live parameters.
  rules.max_live_parameters =
      stage == 3 ? max_live_parameters : std::numeric_limits<std::int64_t>::max();
  return rules;
}

GatherPolicy::GatherPolicy(const FlatLayout& layout, GatherRules rules)
    : layout_(layout),
      rules_(rules),
      entries_(layout.module_count()),
      uses_(layout.module_count()) {
  STRATA_ASSERT(rules.max_live_parameters >= 0);
  STRATA_ASSERT(rules.prefetch_bucket_size >= 0);
}

void GatherPolicy::begin_pass(bool training) {
  cursor_ = 0;
  mode_ = training ? training_mode_ : TraceMode::off;
  if (mode_ == TraceMode::record) {
    trace_.clear();
    trace_elements_.assign(1, 0);
    for (std::vector<std::size_t>& uses : uses_)
      uses.clear();
  }
}

bool GatherPolicy::end_step() {
  const bool recorded = mode_ == TraceMode::record;
  if (recorded) {
    training_mode_ = TraceMode::follow;
  } else if (mode_ == TraceMode::diverged) {
    training_mode_ = TraceMode::record;
  }
  mode_ = TraceMode::off;
  return recorded;
}

bool GatherPolicy::note_acquire(int module) {
  STRATA_ASSERT(module >= 0);
  STRATA_ASSERT(module < layout_.module_count());
  if (mode_ == TraceMode::record) {
    uses_[module].push_back(trace_.size());
    trace_.push_back(module);
    trace_elements_.push_back(trace_elements_.back() + padded(module));
    return true;
  }
  if (mode_ != TraceMode::follow) return true;
  if (cursor_ < trace_.size() && trace_[cursor_] == module) {
    ++cursor_;
    return true;
  }
  mode_ = TraceMode::diverged;
  return false;
}

void GatherPolicy::add_user(int module) {
  Entry& state = entry(module);
  STRATA_ASSERT(state.gathered);
  ++state.users;
}

bool GatherPolicy::release(int module) {
  Entry& state = entry(module);
  STRATA_ASSERT(state.gathered);
  STRATA_ASSERT(state.users > 0);
  if (--state.users > 0) return false;
  if (!rules_.release_after_use || persistent(module)) return false;
  // Only a followed trace says when the module is needed again; recording, departed and
  // evaluation passes drop it.
  if (mode_ == TraceMode::follow) {
    const std::int64_t distance = reuse_distance(module);
    if (distance >= 0 && distance < rules_.max_reuse_distance) return false;
  }
  return true;
}

void GatherPolicy::mark_gathered(int module) {
  Entry& state = entry(module);
  STRATA_ASSERT(!state.gathered);
  state.gathered = true;
  live_elements_ += padded(module);
}

void GatherPolicy::mark_dropped(int module) {
  Entry& state = entry(module);
  STRATA_ASSERT(state.gathered);
  STRATA_ASSERT(state.users == 0);
  state.gathered = false;
  live_elements_ -= padded(module);
}

int GatherPolicy::next_to_evict(std::int64_t elements) const {
  STRATA_ASSERT(elements >= 0);
  if (live_elements_ + elements <= rules_.max_live_parameters) return -1;
  for (bool persistent_too : {false, true}) {
    for (int m = 0; m < layout_.module_count(); ++m)
      if (unused_kept(m, persistent_too)) return m;
  }
  return -1;
}

int GatherPolicy::next_to_reclaim() const {
  for (bool persistent_too : {false, true}) {
    int farthest = -1;
    std::int64_t farthest_distance = -1;
    for (int m = 0; m < layout_.module_count(); ++m) {
      if (!unused_kept(m, persistent_too)) continue;
      std::int64_t distance = reuse_distance(m);
      if (distance < 0) distance = std::numeric_limits<std::int64_t>::max();  // not used again
      if (distance > farthest_distance) {
        farthest = m;
        farthest_distance = distance;
      }
    }
    if (farthest >= 0) return farthest;
  }
  return -1;
}

bool GatherPolicy::persistent(int module) const {
  return layout_.module(module).numel < rules_.persistence_threshold;
}

std::int64_t GatherPolicy::reuse_distance(int module) const {
  const std::vector<std::size_t>& uses = uses_[module];
  const auto next_use = std::ranges::lower_bound(uses, cursor_);
  if (next_use == uses.end()) return -1;
  return trace_elements_[*next_use] - trace_elements_[cursor_];
}

const GatherPolicy::Entry& GatherPolicy::entry(int module) const {
  STRATA_ASSERT(module >= 0);
  STRATA_ASSERT(module < layout_.module_count());
  return entries_[module];
}

GatherPolicy::Entry& GatherPolicy::entry(int module) {
  STRATA_ASSERT(module >= 0);
  STRATA_ASSERT(module < layout_.module_count());
  return entries_[module];
}

// Gathered and nobody using it: kept for reuse or persistence, so a candidate to drop.
bool GatherPolicy::unused_kept(int module, bool persistent_too) const {
  const Entry& state = entry(module);
  return state.gathered && state.users == 0 && (persistent_too || !persistent(module));
}

}  // namespace strata::engine::zero
