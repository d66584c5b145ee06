#pragma once

// Which SIMD level the CPU optimizers run at. The level is chosen at run time, never at compile
// time: the AVX-512 and AVX2 kernels live in their own translation units compiled with their own
// flags, and everything else is baseline x86-64, so one binary runs on any x86-64 CPU.

#include <optional>
#include <string_view>

namespace strata::cpu_adam {

enum class Isa {
  scalar,  // baseline x86-64, one element at a time; the reference the others are checked against
  avx2,    // AVX2 + FMA + F16C, 8 lanes
  avx512,  // AVX-512 F/BW/VL, 16 lanes
};

// "scalar", "avx2", "avx512".
std::string_view isa_name(Isa isa);

// The inverse of isa_name; nullopt for any other text.
std::optional<Isa> parse_isa(std::string_view text);

// Whether this CPU (and the OS, for the wider registers) can run `isa`.
bool isa_supported(Isa isa);

// The widest level this CPU supports.
Isa best_isa();

// The level the kernels use: best_isa(), unless the environment variable STRATA_CPU_ISA names a
// lower one (for tests and comparisons), or set_active_isa() chose one. Throws UserError (exit
// status 2) when STRATA_CPU_ISA is not a level name, or names a level this CPU lacks.
Isa active_isa();

// Makes every later call use `isa`, process-wide. Throws UserError when the CPU lacks it.
void set_active_isa(Isa isa);

}  // namespace strata::cpu_adam
