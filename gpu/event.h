#pragma once

namespace strata::gpu {

// A point in a stream's work, with CUDA's semantics (cudaEvent_t). `Stream::record(event)`
// captures all work enqueued on that stream so far; the event completes when that work has run.
// Other streams wait on it with `Stream::wait(event)`, the host with `synchronize()`.
//
// An event that was never recorded counts as complete (as cudaEventQuery says). Recording it again
// moves the point: a wait issued afterwards waits for the new point, a wait issued before keeps
// the old one. Re-recording on another stream while the previous record is still pending is a
// programmer error (the host backend asserts); use a second event.
//
// Created by `Device::create_event()`, used only with streams of the same device, destroyed by its
// owner at any time (queued waits and records keep what they need alive).
class Event {
 public:
  virtual ~Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Blocks the calling host thread until the recorded work has run. If that work failed (an
  // exception in a stream op before the record, on that stream or on a stream it waited for),
  // rethrows that exception; every later synchronize() of the same record rethrows it again.
  virtual void synchronize() const = 0;

  // True when the recorded work has run (or the event was never recorded). Never blocks, never
  // throws.
  virtual bool query() const = 0;

  // Wall time in milliseconds from `since`'s point to this event's point, both recorded and
  // complete (the caller synchronizes first; asserted). Negative when `since` came later. Used
  // for the per-stream timeline.
  virtual double elapsed_ms(const Event& since) const = 0;

 protected:
  Event() = default;
};

}  // namespace strata::gpu
