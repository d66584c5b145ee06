// Run-time choice of the SIMD level: what the CPU supports, lowered by STRATA_CPU_ISA or
// set_active_isa().

#include "cpu_adam/isa.h"

#include <cpuid.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "base/log.h"

namespace strata::cpu_adam {
namespace {

// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
// The OS side (saved YMM state) is covered by the avx2 check beside it.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & bit_F16C) != 0;
}

// -1 until the first active_isa() call reads the environment.
std::atomic<int> g_active_isa{-1};

Isa isa_from_environment() {
  const char* text = std::getenv("STRATA_CPU_ISA");
  if (text == nullptr || *text == '\0') return best_isa();
  const std::optional<Isa> requested = parse_isa(text);
  if (!requested) {
    throw UserError(fmt::format("STRATA_CPU_ISA is \"{}\", which is not a SIMD level", text),
                    "set STRATA_CPU_ISA to scalar, avx2 or avx512, or unset it to use the best "
                    "level this CPU supports",
                    2);
  }
  if (!isa_supported(*requested)) {
    throw UserError(
        fmt::format("STRATA_CPU_ISA asks for {}, which this CPU does not support (best: {})", text,
                    isa_name(best_isa())),
        fmt::format("set STRATA_CPU_ISA to {} or lower, or unset it", isa_name(best_isa())), 2);
  }
  base::logger("cpu_adam")
      .info("isa={} (from STRATA_CPU_ISA; best={})", text, isa_name(best_isa()));
  return *requested;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return "scalar";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
  }
  return "unknown";
}

std::optional<Isa> parse_isa(std::string_view text) {
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
    if (text == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

bool isa_supported(Isa isa) {
  // __builtin_cpu_supports also checks that the OS saves the wide registers (XCR0).
  switch (isa) {
    case Isa::scalar:
      return true;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case Isa::avx512:
      return isa_supported(Isa::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }
  return false;
}

Isa best_isa() {
  if (isa_supported(Isa::avx512)) return Isa::avx512;
  if (isa_supported(Isa::avx2)) return Isa::avx2;
  return Isa::scalar;
}

Isa active_isa() {
  int current = g_active_isa.load(std::memory_order_relaxed);
  if (current < 0) {
    // Two threads may both read the environment; they agree, and one store wins.
    current = static_cast<int>(isa_from_environment());
    int expected = -1;
    g_active_isa.compare_exchange_strong(expected, current);
    current = g_active_isa.load(std::memory_order_relaxed);
  }
  return static_cast<Isa>(current);
}

void set_active_isa(Isa isa) {
  if (!isa_supported(isa)) {
    throw UserError(fmt::format("this CPU does not support the {} kernels (best: {})",
                                isa_name(isa), isa_name(best_isa())),
                    fmt::format("choose {} or a lower level", isa_name(best_isa())), 2);
  }
  g_active_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

}  // namespace strata::cpu_adam
