// The AVX2 kernels (AVX2 + FMA + F16C: 8 lanes). This file alone is compiled with -mavx2 -mfma
// -mf16c; it is called only after isa_supported(Isa::avx2). As in kernels_avx512.cpp, nothing
// it includes defines an inline function outside its anonymous namespace. AVX2 has no masked
// 16-bit loads, so a tail goes through a zero-filled stack block of 8 lanes and runs the same
// vector code as the body.

#include <immintrin.h>

#include <cstdint>

#include "cpu_adam/detail/kernel_impl.h"

namespace strata::cpu_adam::detail {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int kWidth = 8;

  static V set1(float x) { return _mm256_set1_ps(x); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V sqrt(V a) { return _mm256_sqrt_ps(a); }
  // a / b as kernels_avx512.cpp's quotient, from vrcpps (relative error below 1.5 * 2^-12): the
  // Newton-Raphson step on the quotient squares that to about 2^-23, so the result is within about
  // one ulp of the division. Lanes whose estimate breaks down (q1 NaN: b zero, subnormal or
  // infinite, a / b past FLT_MAX) are divided for real. |b| must stay below 2^126, where the
  // reciprocal is still normal; the optimizers' denominators stay below 2^77.
  static V quotient(V a, V b) {
    const V r = _mm256_rcp_ps(b);
    const V q0 = _mm256_mul_ps(a, r);
    const V residual = _mm256_fnmadd_ps(b, q0, a);
    V q1 = _mm256_fmadd_ps(residual, r, q0);
    const V bad = _mm256_cmp_ps(q1, q1, _CMP_UNORD_Q);
    if (_mm256_movemask_ps(bad) != 0) [[unlikely]]
      q1 = _mm256_blendv_ps(q1, _mm256_div_ps(a, b), bad);
    return q1;
  }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V sign_step(V c, V s) { return _mm256_xor_ps(_mm256_and_ps(c, _mm256_set1_ps(-0.0f)), s); }

  static __m128i load128(const void* ptr) {
    return _mm_loadu_si128(static_cast<const __m128i*>(ptr));
  }
  template <class T>
  static V load(const typename T::Storage* ptr) {
    if constexpr (T::kKind == 0) {
      return _mm256_loadu_ps(ptr);
    } else if constexpr (T::kKind == 1) {
      const __m256i wide = _mm256_cvtepu16_epi32(load128(ptr));
      return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
    } else {
      return _mm256_cvtph_ps(load128(ptr));
    }
  }
  template <class T>
  static V load_partial(const typename T::Storage* ptr, int n) {
    alignas(32) typename T::Storage block[kWidth] = {};
    for (int k = 0; k < n; ++k)
      block[k] = ptr[k];
    return load<T>(block);
  }
  static void store(float* ptr, V x) { _mm256_storeu_ps(ptr, x); }
  static void store_partial(float* ptr, V x, int n) {
    alignas(32) float block[kWidth];
    _mm256_store_ps(block, x);
    for (int k = 0; k < n; ++k)
      ptr[k] = block[k];
  }

  // Round to nearest even as cpu_adam/half.h's to_bf16, 8 lanes at a time.
  static __m128i narrow_bf16(V x) {
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i high = _mm256_srli_epi32(bits, 16);
    const __m256i bias =
        _mm256_add_epi32(_mm256_and_si256(high, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    rounded = _mm256_blendv_epi8(rounded, quiet, nan);
    // Every lane is below 2^16, so the saturating pack is exact; it packs within 128-bit halves,
    // and the permute brings the two halves' results together.
    const __m256i packed = _mm256_packus_epi32(rounded, rounded);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0b1000));
  }
  template <class T>
  static __m128i narrow(V x) {
    if constexpr (T::kKind == 1) {
      return narrow_bf16(x);
    } else {
      return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
  }
  template <class T>
  static void store_copy(std::uint16_t* ptr, V x, bool stream) {
    __m128i* target = static_cast<__m128i*>(static_cast<void*>(ptr));
    if (stream) {
      _mm_stream_si128(target, narrow<T>(x));
    } else {
      _mm_storeu_si128(target, narrow<T>(x));
    }
  }
  template <class T>
  static void store_copy_partial(std::uint16_t* ptr, V x, int n) {
    alignas(16) std::uint16_t block[kWidth];
    _mm_store_si128(static_cast<__m128i*>(static_cast<void*>(block)), narrow<T>(x));
    for (int k = 0; k < n; ++k)
      ptr[k] = block[k];
  }
  // 8 copies of 2 bytes: _mm_stream_si128 needs 16-byte alignment.
  static constexpr std::uintptr_t kStreamAlignment = 16;
  static void fence() { _mm_sfence(); }

  struct Acc {
    __m256d low, high;
  };
  static Acc acc_zero() { return Acc{_mm256_setzero_pd(), _mm256_setzero_pd()}; }
  static void acc_squares(Acc& acc, V x) {
    const __m256d low = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    const __m256d high = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    acc.low = _mm256_fmadd_pd(low, low, acc.low);
    acc.high = _mm256_fmadd_pd(high, high, acc.high);
  }
  static double acc_sum(const Acc& acc) {
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, _mm256_add_pd(acc.low, acc.high));
    return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  }
  using Flags = __m256i;
  static Flags flags_zero() { return _mm256_setzero_si256(); }
  static void flags_add(Flags& flags, V x) {
    const __m256i exponent = _mm256_set1_epi32(0x7f80'0000);
    const __m256i bits = _mm256_and_si256(_mm256_castps_si256(x), exponent);
    flags = _mm256_or_si256(flags, _mm256_cmpeq_epi32(bits, exponent));
  }
  static bool flags_any(Flags flags) { return _mm256_testz_si256(flags, flags) == 0; }
};

}  // namespace

const KernelTable& avx2_kernels() {
  static const KernelTable table = make_kernel_table<Avx2>();
  return table;
}

}  // namespace strata::cpu_adam::detail
