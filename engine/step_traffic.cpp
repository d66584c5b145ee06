#include "engine/step_traffic.h"

namespace strata::engine {

Traffic Traffic::minus(const Traffic& earlier) const {
  const gpu::TransferCounters& a = transfers;
  const gpu::TransferCounters& b = earlier.transfers;
  return {{a.bytes_h2d - b.bytes_h2d, a.bytes_d2h - b.bytes_d2h, a.bytes_d2d - b.bytes_d2d,
           a.bytes_h2h - b.bytes_h2h},
          nvme_read - earlier.nvme_read,
          nvme_write - earlier.nvme_write};
}

Traffic Traffic::plus(const Traffic& other) const {
  const gpu::TransferCounters& a = transfers;
  const gpu::TransferCounters& b = other.transfers;
  return {{a.bytes_h2d + b.bytes_h2d, a.bytes_d2h + b.bytes_d2h, a.bytes_d2d + b.bytes_d2d,
           a.bytes_h2h + b.bytes_h2h},
          nvme_read + other.nvme_read,
          nvme_write + other.nvme_write};
}

bool Traffic::operator==(const Traffic& other) const {
  const gpu::TransferCounters& a = transfers;
  const gpu::TransferCounters& b = other.transfers;
  return a.bytes_h2d == b.bytes_h2d && a.bytes_d2h == b.bytes_d2h && a.bytes_d2d == b.bytes_d2d &&
         a.bytes_h2h == b.bytes_h2h && nvme_read == other.nvme_read &&
         nvme_write == other.nvme_write;
}

void StepTraffic::begin_step() {
  if (optimizer_running_) return;  // the counters move: the marks of the last step stand
  const TrafficReading now = read_();
  own_from_ = now.all.minus(now.optimizer);
  optimizer_from_ = now.optimizer;
}

void StepTraffic::optimizer_finished() {
  const Traffic optimizer = read_().optimizer;
  finished_ = finished_.plus(optimizer.minus(optimizer_from_));
  optimizer_from_ = optimizer;
  optimizer_running_ = false;
}

Traffic StepTraffic::end_step(bool optimizer_goes_on) {
  const TrafficReading now = read_();
  const Traffic own = now.all.minus(now.optimizer);
  const Traffic moved = own.minus(own_from_).plus(finished_);
  own_from_ = own;
  finished_ = {};
  optimizer_running_ = optimizer_goes_on;
  return moved;
}

void StepTraffic::forget() {
  finished_ = {};
  optimizer_running_ = false;
}

}  // namespace strata::engine
