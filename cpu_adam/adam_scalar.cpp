// The scalar kernels: one element at a time, baseline x86-64, no FMA (a*b+c is rounded twice).
// They are the readable reference for the SIMD levels (kernels_avx2.cpp, kernels_avx512.cpp run
// the same templates, detail/kernel_impl.h, with 8 and 16 lanes and fused multiply-adds), and
// the fallback on a CPU without AVX2. Beside them, the same loads and stores with the GPU
// optimizer's arithmetic (detail/fused_lane.h): its twin on the CPU.

#include <bit>
#include <cmath>
#include <cstdint>

#include "cpu_adam/detail/fused_lane.h"
#include "cpu_adam/detail/kernel_impl.h"
#include "cpu_adam/half.h"

namespace strata::cpu_adam::detail {
namespace {

// One element at a time: loads, stores and the scan, shared by the scalar reference and the GPU
// optimizer's twin.
struct ScalarMemory {
  using V = float;
  static constexpr int kWidth = 1;

  template <class T>
  static V load(const typename T::Storage* ptr) {
    if constexpr (T::kKind == 0) {
      return *ptr;
    } else if constexpr (T::kKind == 1) {
      return to_float(bf16{*ptr});
    } else {
      return to_float(fp16{*ptr});
    }
  }
  // With one lane there is never a partial block.
  template <class T>
  static V load_partial(const typename T::Storage* ptr, int /*n*/) {
    return load<T>(ptr);
  }
  static void store(float* ptr, V x) { *ptr = x; }
  static void store_partial(float* ptr, V x, int /*n*/) { *ptr = x; }
  template <class T>
  static void store_copy(std::uint16_t* ptr, V x, bool /*stream*/) {
    if constexpr (T::kKind == 1) {
      *ptr = to_bf16(x).bits;
    } else {
      *ptr = to_fp16(x).bits;
    }
  }
  template <class T>
  static void store_copy_partial(std::uint16_t* ptr, V x, int /*n*/) {
    store_copy<T>(ptr, x, false);
  }
  static constexpr std::uintptr_t kStreamAlignment = 0;  // one element at a time: no streaming
  static void fence() {}

  using Acc = double;
  static Acc acc_zero() { return 0.0; }
  static void acc_squares(Acc& acc, V x) { acc += static_cast<double>(x) * static_cast<double>(x); }
  static double acc_sum(const Acc& acc) { return acc; }
  using Flags = bool;
  static Flags flags_zero() { return false; }
  static void flags_add(Flags& flags, V x) { flags = flags || !std::isfinite(x); }
  static bool flags_any(Flags flags) { return flags; }
};

struct Scalar : ScalarMemory {
  static V set1(float x) { return x; }
  static V add(V a, V b) { return a + b; }
  static V mul(V a, V b) { return a * b; }
  static V quotient(V a, V b) { return a / b; }  // the reference divides, correctly rounded
  static V sqrt(V a) { return std::sqrt(a); }
  static V fmadd(V a, V b, V c) { return a * b + c; }
  static V sign_step(V c, V s) {
    const std::uint32_t sign = std::bit_cast<std::uint32_t>(c) & 0x8000'0000u;
    return std::bit_cast<float>(sign ^ std::bit_cast<std::uint32_t>(s));
  }
};

// The GPU optimizer's arithmetic over the scalar loads and stores.
struct FusedLane : ScalarMemory, FusedLaneMath {
  using V = float;
  static constexpr int kWidth = 1;
};

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table = make_kernel_table<Scalar>();
  return table;
}

const KernelTable& fused_lane_kernels() {
  static const KernelTable table = make_kernel_table<FusedLane>();
  return table;
}

}  // namespace strata::cpu_adam::detail
