#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/assert.h"

namespace strata::gpu::detail {

// The spans a CUDA stream holds between two synchronizes (a pair of events each); beyond them its
// ops are not drawn, with one warning. A span is one run of a module's ops of one kind, so a
// step opens a few per module, pass and micro-batch.
inline constexpr std::int64_t stream_spans_held_max = 4096;

// The bookkeeping behind a stream's timeline row when the device times its ops with events (the
// CUDA backend, a begin and an end event per span): which ops share a span, which pair of events
// each span uses, and which spans a synchronize may read back. It holds no device types: the
// caller keeps one pair of events per slot and records them as place() says.
//
// Consecutive ops of one kind and one label (the enqueuing thread's Timeline::current_label())
// share a span: its begin event is recorded before the first op and its end event after every op,
// so the span runs from the start of its first op to the end of its last, and a module's hundred
// kernels cost two events, not two hundred. Spans live in a ring of `capacity` slots until they
// are resolved; while every slot holds a span not yet resolved, further ops are not drawn (and
// counted), so the events a stream holds are bounded.
//
// Not thread-safe: the stream holds its lock around every call.
class SpanLog {
 public:
  // What to record around one op: for `open`, the slot's begin event before the op and its end
  // event after it; for `extend`, only the slot's end event after the op; for `none`, nothing.
  enum class Mark { none, open, extend };
  struct Placement {
    Mark mark = Mark::none;
    std::int64_t slot = -1;
  };

  // A span that has run, for resolve()'s visitor.
  struct Closed {
    std::int64_t slot;
    std::uint64_t recording;  // the timeline's recording_number() when the span was opened
    std::string_view label;   // "<kind> <label>", or "<kind>" for an empty label
  };

  explicit SpanLog(std::int64_t capacity);

  std::int64_t capacity() const noexcept { return static_cast<std::int64_t>(slots_.size()); }

  // Places an op of `kind` ("kernel", "copy h2d", "wait", ...) enqueued by a thread whose
  // timeline label is `label`, while the timeline's recording number `recording` runs.
  Placement place(std::string_view kind, std::string_view label, std::uint64_t recording);

  // Ends the newest span, so that no later op joins it, and returns the mark to resolve through:
  // called before the stream synchronizes, after which every span before the mark has run.
  std::int64_t close() noexcept;

  // Calls `visit(Closed)` for each span before mark `through` not yet resolved, oldest first,
  // and frees its slot. Marks older than what was resolved already visit nothing.
  template <typename Visit>
  void resolve(std::int64_t through, Visit&& visit) {
    STRATA_ASSERT(through <= opened_);
    for (; resolved_ < through; ++resolved_) {
      const std::int64_t slot = resolved_ % capacity();
      const Slot& span = slots_[static_cast<std::size_t>(slot)];
      combined_.assign(span.kind);
      if (!span.label.empty()) combined_.append(" ").append(span.label);
      visit(Closed{slot, span.recording, combined_});
    }
  }

  // Spans opened and not yet resolved.
  std::int64_t held() const noexcept { return opened_ - resolved_; }
  // Ops not drawn because every slot was held, since the last call; resets the count.
  std::int64_t take_dropped() noexcept;

 private:
  struct Slot {
    std::string_view kind;  // one of the stream's kind names, which are string literals
    std::string label;      // the enqueuing thread's label
    std::uint64_t recording = 0;
  };

  std::vector<Slot> slots_;
  std::string combined_;       // the label resolve() hands out, reused
  std::int64_t opened_ = 0;    // spans opened so far; span n lives in slot n % capacity
  std::int64_t resolved_ = 0;  // spans resolved so far, the oldest first
  bool newest_open_ = false;   // whether the newest span may take more ops
  std::int64_t dropped_ = 0;
};

}  // namespace strata::gpu::detail
