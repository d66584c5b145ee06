#include "aio/fault_plan.h"

namespace strata::aio {
namespace {

// splitmix64: a stateless hash of (seed, index), so any thread can ask about any completion.
std::uint64_t mix(std::uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

}  // namespace

FaultPlan& FaultPlan::fail(std::int64_t index, int errno_value) {
  planned_.push_back({index, Fault{FaultKind::error, errno_value, 0}});
  return *this;
}

FaultPlan& FaultPlan::shorten(std::int64_t index) {
  planned_.push_back({index, Fault{FaultKind::short_transfer, 0, 0}});
  return *this;
}

FaultPlan& FaultPlan::flip_bit(std::int64_t index) {
  std::uint64_t bit = mix(seed_ ^ mix(static_cast<std::uint64_t>(index)));
  planned_.push_back({index, Fault{FaultKind::bit_flip, 0, bit}});
  return *this;
}

FaultPlan& FaultPlan::fail_randomly(double probability, int errno_value) {
  random_probability_ = probability;
  random_errno_ = errno_value;
  return *this;
}

FaultPlan& FaultPlan::refuse_direct_open() {
  refuse_direct_open_ = true;
  return *this;
}

FaultPlan& FaultPlan::refuse_io_uring(int errno_value) {
  refuse_io_uring_errno_ = errno_value;
  return *this;
}

std::optional<Fault> FaultPlan::at(std::int64_t index, bool is_read) const {
  for (const Planned& planned : planned_) {
    if (planned.index != index) continue;
    if (planned.fault.kind == FaultKind::bit_flip && !is_read) continue;
    return planned.fault;
  }
  if (random_probability_ > 0.0) {
    std::uint64_t draw = mix(seed_ ^ mix(static_cast<std::uint64_t>(index) + 1));
    double unit = static_cast<double>(draw >> 11) * 0x1.0p-53;
    if (unit < random_probability_) return Fault{FaultKind::error, random_errno_, 0};
  }
  return std::nullopt;
}

}  // namespace strata::aio
