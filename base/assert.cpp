#include "base/assert.h"

#include <cstdio>
#include <cstdlib>

namespace strata::base {

void assert_fail(const char* expression, const char* file, int line) noexcept {
  std::fprintf(stderr, "strata: assertion failed: %s (%s:%d)\n", expression, file, line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace strata::base
