#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace strata::aio {

// What a fault does to one real completion.
enum class FaultKind {
  error,           // the result becomes -errno_value (EIO, ENOSPC, EAGAIN, ...)
  short_transfer,  // the result becomes about half the bytes, aligned down to 4 KiB
  bit_flip,        // after a real, successful read, one bit of the data is flipped
};

struct Fault {
  FaultKind kind = FaultKind::error;
  int errno_value = 0;
  // Which bit of the piece a bit_flip flips (taken modulo the piece's bit count).
  std::uint64_t bit_index = 0;
};

// Seeded fault injection, compiled in and off unless a test sets one (TigerBeetle's
// testing/storage.zig). The engine numbers every completion it reaps, engine-wide and from 0,
// and asks the plan whether the Nth one is faulted; the answer depends on (seed, N) only, so a
// seed reproduces a run up to the order in which several rings reap. Real I/O always happens
// first: a fault rewrites a real result, it never replaces the transfer.
class FaultPlan {
 public:
  FaultPlan() = default;
  explicit FaultPlan(std::uint64_t seed) : seed_(seed) {}

  // The completion numbered `index` returns -errno_value.
  FaultPlan& fail(std::int64_t index, int errno_value);
  // The completion numbered `index` returns a short count (only for pieces of 8 KiB or more).
  FaultPlan& shorten(std::int64_t index);
  // The read completion numbered `index` gets one bit flipped (chosen from the seed).
  FaultPlan& flip_bit(std::int64_t index);
  // Every completion is, with `probability`, rewritten to -errno_value (decided from the seed).
  FaultPlan& fail_randomly(double probability, int errno_value);
  // File opens behave as if the file system refused O_DIRECT with EINVAL (as tmpfs did before
  // Linux 6.6), exercising the buffered fallback.
  FaultPlan& refuse_direct_open();
  // io_uring set-up fails with -errno_value (ENOSYS, EPERM), exercising the thread-pool fallback.
  FaultPlan& refuse_io_uring(int errno_value);

  std::uint64_t seed() const noexcept { return seed_; }
  bool direct_open_refused() const noexcept { return refuse_direct_open_; }
  int io_uring_refused_errno() const noexcept { return refuse_io_uring_errno_; }
  // Whether any completion may be rewritten (a planned or random fault); false for the default
  // plan, which lets the rings skip the per-completion lookup.
  bool rewrites_completions() const noexcept {
    return !planned_.empty() || random_probability_ > 0.0;
  }
  // The fault, if any, for completion `index` of a read (`is_read`) or a write.
  std::optional<Fault> at(std::int64_t index, bool is_read) const;

 private:
  struct Planned {
    std::int64_t index;
    Fault fault;
  };
  std::uint64_t seed_ = 0;
  std::vector<Planned> planned_;
  double random_probability_ = 0.0;
  int random_errno_ = 0;
  bool refuse_direct_open_ = false;
  int refuse_io_uring_errno_ = 0;
};

}  // namespace strata::aio
