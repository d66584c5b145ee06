#include "base/timeline.h"

#include <algorithm>
#include <utility>

namespace strata::base {
namespace {

thread_local std::string current;

}  // namespace

void Timeline::start() {
  std::lock_guard lock(mutex_);
  spans_.clear();
  origin_ = Clock::now();
  recording_number_.fetch_add(1, std::memory_order_relaxed);
  recording_.store(true, std::memory_order_relaxed);
}

void Timeline::stop() {
  recording_.store(false, std::memory_order_relaxed);
}

void Timeline::add(std::string_view lane, std::string_view label, Clock::time_point begin,
                   Clock::time_point end) {
  if (!recording()) return;
  std::lock_guard lock(mutex_);
  if (end < origin_) return;
  const auto since = [&](Clock::time_point at) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::max(at, origin_) - origin_)
        .count();
  };
  spans_.push_back(Span{std::string(lane), std::string(label), since(begin), since(end)});
}

void Timeline::add_device_span(std::uint64_t recording, std::string_view lane,
                               std::string_view label, const DeviceClockReference& reference,
                               double begin_ms, double end_ms) {
  if (recording != recording_number()) return;
  const Clock::time_point midpoint = reference.before + (reference.after - reference.before) / 2;
  const auto at = [&](double ms) {
    return midpoint + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double, std::milli>(ms));
  };
  add(lane, label, at(begin_ms), at(std::max(begin_ms, end_ms)));
}

std::vector<Timeline::Span> Timeline::spans() const {
  std::lock_guard lock(mutex_);
  return spans_;
}

const std::string& Timeline::current_label() {
  return current;
}

Timeline::Scope::Scope(std::string_view lane, std::string_view what, std::string_view subject) {
  if (!timeline().recording()) return;
  active_ = true;
  lane_ = lane;
  std::string label(what);
  if (!subject.empty()) label.append(" ").append(subject);
  previous_ = std::exchange(current, std::move(label));
  begin_ = Clock::now();
}

Timeline::Scope::~Scope() {
  if (!active_) return;
  timeline().add(lane_, current, begin_, Clock::now());
  current = std::move(previous_);
}

Timeline& timeline() {
  static Timeline instance;
  return instance;
}

}  // namespace strata::base
