#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace strata::base {

// A record of what each thread of the process did when: the streams' ops, the engine's modules,
// the NVMe transfers, the optimizer's sub-groups, each a span on a named lane (`strata train
// --timeline`, docs/gpu.md). Off unless started; while off a span costs one relaxed atomic load.
// Thread-safe.
class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  struct Span {
    std::string lane;           // "compute", "h2d", "nvme read", "host", ...
    std::string label;          // what ran: "task forward h.3", "copy h2d backward h.1", ...
    std::int64_t begin_ns = 0;  // since start()
    std::int64_t end_ns = 0;
  };

  // Where a device's clock meets this one: a device event (a CUDA event) that completed at some
  // instant between `before` and `after` on this clock, because it was recorded after `before`
  // and seen complete before `after`.
  struct DeviceClockReference {
    Clock::time_point before;
    Clock::time_point after;
  };

  // Forgets what was recorded and records from now on.
  void start();
  void stop();
  bool recording() const noexcept { return recording_.load(std::memory_order_relaxed); }
  // Which recording this is: start() counts them, from 1 (0: never started). Work timed by a
  // device is drawn only in the recording it was enqueued in (add_device_span).
  std::uint64_t recording_number() const noexcept {
    return recording_number_.load(std::memory_order_relaxed);
  }

  // A span that began and ended at those instants (ignored unless recording, or when it ended
  // before start()).
  void add(std::string_view lane, std::string_view label, Clock::time_point begin,
           Clock::time_point end);
  // A span a device timed with a pair of events, enqueued while recording number `recording` ran:
  // `begin_ms` and `end_ms` are the device's times after the reference event (cudaEventElapsedTime
  // from it; negative before it). It is placed at the midpoint of the reference's interval plus
  // those times, so off by at most half that interval; an end before its begin is taken as the
  // begin. Ignored unless recording number `recording` is still going on.
  void add_device_span(std::uint64_t recording, std::string_view lane, std::string_view label,
                       const DeviceClockReference& reference, double begin_ms, double end_ms);
  std::vector<Span> spans() const;

  // What the calling thread is doing (its innermost Scope's label), so that work it hands to
  // another thread (a stream op) can say which module it belongs to. Empty outside a Scope.
  static const std::string& current_label();

  // A span on `lane` from construction to destruction, labelled "`what` `subject`", which is
  // also the thread's current label meanwhile. Does nothing (and builds no label) unless the
  // process's timeline is recording when it is made.
  class Scope {
   public:
    Scope(std::string_view lane, std::string_view what, std::string_view subject = {});
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    bool active_ = false;
    std::string lane_;
    std::string previous_;
    Clock::time_point begin_;
  };

 private:
  std::atomic<bool> recording_ = false;
  std::atomic<std::uint64_t> recording_number_ = 0;
  mutable std::mutex mutex_;
  Clock::time_point origin_;
  std::vector<Span> spans_;
};

// The process's timeline.
Timeline& timeline();

}  // namespace strata::base
