#pragma once

// STRATA_ASSERT is for programmer errors only, and stays on in release builds: a broken invariant
// in a memory manager that moves other people's training state must stop the program, not
// corrupt a checkpoint. Never use it for I/O results or user input; those throw.

namespace strata::base {
[[noreturn]] void assert_fail(const char* expression, const char* file, int line) noexcept;
}  // namespace strata::base

#define STRATA_ASSERT(condition)                                   \
  do {                                                             \
    if (!(condition)) [[unlikely]] {                               \
      ::strata::base::assert_fail(#condition, __FILE__, __LINE__); \
    }                                                              \
  } while (false)
