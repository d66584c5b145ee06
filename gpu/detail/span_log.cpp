#include "gpu/detail/span_log.h"

#include <utility>

namespace strata::gpu::detail {

SpanLog::SpanLog(std::int64_t capacity) : slots_(static_cast<std::size_t>(capacity)) {
  STRATA_ASSERT(capacity > 0);
}

SpanLog::Placement SpanLog::place(std::string_view kind, std::string_view label,
                                  std::uint64_t recording) {
  if (newest_open_) {
    const std::int64_t newest = (opened_ - 1) % capacity();
    const Slot& span = slots_[static_cast<std::size_t>(newest)];
    if (span.kind == kind && span.label == label && span.recording == recording) {
      return Placement{Mark::extend, newest};
    }
  }
  if (held() == capacity()) {
    // The newest span must not take a later op either: this one, between them, is not drawn.
    newest_open_ = false;
    dropped_ += 1;
    return Placement{};
  }
  const std::int64_t slot = opened_ % capacity();
  Slot& span = slots_[static_cast<std::size_t>(slot)];
  span.kind = kind;
  span.label.assign(label);  // the slot's string keeps its capacity: no allocation once warm
  span.recording = recording;
  opened_ += 1;
  newest_open_ = true;
  STRATA_ASSERT(held() <= capacity());
  return Placement{Mark::open, slot};
}

std::int64_t SpanLog::close() noexcept {
  newest_open_ = false;
  return opened_;
}

std::int64_t SpanLog::take_dropped() noexcept {
  return std::exchange(dropped_, 0);
}

}  // namespace strata::gpu::detail
