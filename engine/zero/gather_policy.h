#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/assert.h"
#include "base/by_index.h"
#include "engine/zero/flat_layout.h"

namespace strata::engine::zero {

// zero_optimization.stage3_*, as the gather policy applies them.
struct GatherRules {
  // Stage 3 releases gathered parameters after use; stages 0-2 keep every module gathered (they
  // are re-gathered only after an optimizer step changed them).
  bool release_after_use = false;
  // Modules with fewer elements stay gathered; a module used again within this many elements of
  // other modules' use is kept; prefetch this many elements ahead; at most this many gathered
  // elements live at once (modules in use always are).
  std::int64_t persistence_threshold = 0;
  std::int64_t max_reuse_distance = 0;
  std::int64_t prefetch_bucket_size = 0;
  std::int64_t max_live_parameters = 0;
};

// The rules zero_optimization gives at `stage` with its stage3_* values: the engine's parameter
// coordinator takes them from here, in the engine and in the memory estimate's counted step.
GatherRules gather_rules(int stage, std::int64_t persistence_threshold,
                         std::int64_t max_reuse_distance, std::int64_t prefetch_bucket_size,
                         std::int64_t max_live_parameters);

// Which gathered modules to keep, drop and prefetch: the rules of docs/architecture.md ("One
// training step", 1) in one place. The parameter coordinator asks it while it gathers and drops
// device memory.
//
// It holds the module order recorded on the first training step (the trace), the position in
// it, and which modules are gathered with how many users; it holds no buffers and does no device
// work. The caller reports each gather and drop (mark_gathered, mark_dropped) as it makes them.
class GatherPolicy {
 public:
  GatherPolicy(const FlatLayout& layout, GatherRules rules);

  // Starts a pass over the modules: training passes follow (or record) the trace, evaluation
  // passes neither read nor change it.
  void begin_pass(bool training);
  // Ends a training step: a recording trace becomes the one to follow (returns true then); a step
  // that departed from the trace makes the next one record anew.
  bool end_step();

  // Notes that `module` is acquired next: recorded in the trace, or checked against it. Returns
  // false when this use departs from the recorded order: prefetching stops for the pass.
  bool note_acquire(int module);
  // One more user of the gathered `module`.
  void add_user(int module);
  // One user less; true when the last user is gone and the rules drop the module now (it is
  // neither persistent nor, on a followed trace, used again within max_reuse_distance).
  [[nodiscard]] bool release(int module);

  // The caller gathered or dropped `module`.
  void mark_gathered(int module);
  void mark_dropped(int module);

  // The next module to drop before `elements` more can be gathered under max_live_parameters:
  // unused modules in module order, persistent ones after every other; -1 when the new module
  // fits or nothing more can go. Drop it and ask again.
  int next_to_evict(std::int64_t elements) const;
  // The module the memory's reclaimer drops next: of those nobody uses, the one needed again
  // last along the trace (one not needed again first), persistent ones only when no other is
  // left; -1 when none is gathered and unused. Kept modules are a cache, and a budget with no
  // room for what the step needs now empties it first.
  int next_to_reclaim() const;
  // On a followed trace, calls prefetch(m) for the modules next in it that are not gathered and
  // that reads_from_nvme(m), in trace order, while their elements total at most
  // prefetch_bucket_size; stops when prefetch returns false.
  template <class ReadsFromNvme, class Prefetch>
  void prefetch_ahead(ReadsFromNvme reads_from_nvme, Prefetch prefetch) const;
  // On a followed trace, the window of the next uses in it whose elements stay below
  // prefetch_bucket_size (at least the next use, whenever the bucket is not 0): calls gather(m),
  // in trace order, for each module in it that is not gathered and that uploads_ahead(m) (its
  // shard is in CPU memory: the copy to the device can start now, on the copy stream), while each
  // fits under max_live_parameters without dropping anything. The window counts every use, so a
  // module needed far along the trace is not taken early. gather(m) makes the module gathered
  // (mark_gathered) with no user yet and returns true, or returns false when it could not (no
  // memory for it now): then nothing more is taken. Its first acquire uses it.
  template <class UploadsAhead, class Gather>
  void gather_ahead(UploadsAhead uploads_ahead, Gather gather);

  bool is_gathered(int module) const { return entry(module).gathered; }
  int users(int module) const { return entry(module).users; }
  std::int64_t live_elements() const { return live_elements_; }
  bool persistent(int module) const;
  // Elements of other modules acquired between the trace position and the next use of `module`,
  // or -1 when the trace does not use it again this step.
  std::int64_t reuse_distance(int module) const;
  std::size_t trace_position() const { return cursor_; }
  std::size_t trace_length() const { return trace_.size(); }

 private:
  struct Entry {
    bool gathered = false;
    int users = 0;
  };
  enum class TraceMode { record, follow, diverged, off };

  const Entry& entry(int module) const;
  Entry& entry(int module);
  std::int64_t padded(int module) const { return layout_.module(module).padded_numel; }
  bool unused_kept(int module, bool persistent_too) const;

  const FlatLayout& layout_;
  GatherRules rules_;
  base::ByIndex<Entry> entries_;
  std::int64_t live_elements_ = 0;
  TraceMode mode_ = TraceMode::record;
  TraceMode training_mode_ = TraceMode::record;
  std::vector<int> trace_;
  std::size_t cursor_ = 0;
  // The trace indexed, as it is recorded: trace_elements_[i] is the padded elements of
  // trace_[0, i), and uses_[m] the positions of module m in it, so that a reuse distance is one
  // search and one difference rather than a walk along the trace.
  std::vector<std::int64_t> trace_elements_{0};
  base::ByIndex<std::vector<std::size_t>> uses_;
};

template <class ReadsFromNvme, class Prefetch>
void GatherPolicy::prefetch_ahead(ReadsFromNvme reads_from_nvme, Prefetch prefetch) const {
  if (mode_ != TraceMode::follow) return;
  std::int64_t elements = 0;
  for (std::size_t i = cursor_; i < trace_.size(); ++i) {
    const int next = trace_[i];
    if (is_gathered(next) || !reads_from_nvme(next)) continue;
    elements += padded(next);
    if (elements > rules_.prefetch_bucket_size || !prefetch(next)) return;
  }
}

template <class UploadsAhead, class Gather>
void GatherPolicy::gather_ahead(UploadsAhead uploads_ahead, Gather gather) {
  if (mode_ != TraceMode::follow) return;
  std::int64_t window = 0;
  for (std::size_t i = cursor_; i < trace_.size() && window < rules_.prefetch_bucket_size; ++i) {
    const int next = trace_[i];
    window += padded(next);
    if (is_gathered(next) || !uploads_ahead(next)) continue;
    if (live_elements_ + padded(next) > rules_.max_live_parameters) return;
    if (!gather(next)) return;
    STRATA_ASSERT(is_gathered(next));
  }
}

}  // namespace strata::engine::zero
