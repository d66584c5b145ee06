// The AVX-512 kernels (F, BW, VL: 16 lanes, masked tails). This file alone is compiled with
// -mavx512f -mavx512bw -mavx512vl; it is called only after isa_supported(Isa::avx512). It
// includes nothing that defines an inline function outside this file's anonymous namespace (see
// detail/kernels.h for why). bf16 rounding uses integer arithmetic rather than AVX512_BF16's
// vcvtneps2bf16, which flushes subnormals to zero and would not be correctly rounded.

#include <immintrin.h>

#include <cstdint>

#include "cpu_adam/detail/kernel_impl.h"

namespace strata::cpu_adam::detail {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kWidth = 16;

  static V set1(float x) { return _mm512_set1_ps(x); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V sqrt(V a) { return _mm512_sqrt_ps(a); }
  // a / b from vrcp14ps (relative error below 2^-14) and one Newton-Raphson step on the quotient
  // (Markstein's form: q1 = q0 + r * (a - b * q0), the residual exact through the FMA): within one
  // ulp of the division, without the divider (vdivps zmm holds port 0 for about 10 cycles and
  // shares its unit with vsqrtps). Where the estimate breaks down, b zero or subnormal (r
  // infinite), b infinite (r zero, so b * q0 is NaN) or a / b past FLT_MAX (q0 infinite), q1 comes
  // out NaN; those lanes, rare (never with eps > 0 and finite states), are divided for real, so
  // each special case gives what vdivps gives. |b| must stay below 2^126, where the reciprocal is
  // still normal; the optimizers' denominators stay below 2^77 (sqrt(FLT_MAX) times a bias
  // correction of at most 2^12).
  static V quotient(V a, V b) {
    const V r = _mm512_rcp14_ps(b);
    const V q0 = _mm512_mul_ps(a, r);
    const V residual = _mm512_fnmadd_ps(b, q0, a);
    V q1 = _mm512_fmadd_ps(residual, r, q0);
    const __mmask16 bad = _mm512_cmp_ps_mask(q1, q1, _CMP_UNORD_Q);
    if (bad != 0) [[unlikely]]
      q1 = _mm512_mask_div_ps(q1, bad, a, b);
    return q1;
  }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V sign_step(V c, V s) {
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(c), _mm512_set1_epi32(INT32_MIN));
    return _mm512_castsi512_ps(_mm512_xor_si512(sign, _mm512_castps_si512(s)));
  }

  static __mmask16 tail_mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static V widen_bf16(__m256i bits) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }

  template <class T>
  static V load(const typename T::Storage* ptr) {
    if constexpr (T::kKind == 0) {
      return _mm512_loadu_ps(ptr);
    } else if constexpr (T::kKind == 1) {
      return widen_bf16(_mm256_loadu_epi16(ptr));
    } else {
      return _mm512_cvtph_ps(_mm256_loadu_epi16(ptr));
    }
  }
  template <class T>
  static V load_partial(const typename T::Storage* ptr, int n) {
    if constexpr (T::kKind == 0) {
      return _mm512_maskz_loadu_ps(tail_mask(n), ptr);
    } else if constexpr (T::kKind == 1) {
      return widen_bf16(_mm256_maskz_loadu_epi16(tail_mask(n), ptr));
    } else {
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), ptr));
    }
  }
  static void store(float* ptr, V x) { _mm512_storeu_ps(ptr, x); }
  static void store_partial(float* ptr, V x, int n) { _mm512_mask_storeu_ps(ptr, tail_mask(n), x); }

  // Round to nearest even as cpu_adam/half.h's to_bf16, 16 lanes at a time.
  static __m256i narrow_bf16(V x) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i high = _mm512_srli_epi32(bits, 16);
    const __m512i bias =
        _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(rounded);
  }
  template <class T>
  static __m256i narrow(V x) {
    if constexpr (T::kKind == 1) {
      return narrow_bf16(x);
    } else {
      return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
  }
  template <class T>
  static void store_copy(std::uint16_t* ptr, V x, bool stream) {
    const __m256i narrow_bits = narrow<T>(x);
    if (stream) {
      _mm256_stream_si256(static_cast<__m256i*>(static_cast<void*>(ptr)), narrow_bits);
    } else {
      _mm256_storeu_epi16(ptr, narrow_bits);
    }
  }
  template <class T>
  static void store_copy_partial(std::uint16_t* ptr, V x, int n) {
    _mm256_mask_storeu_epi16(ptr, tail_mask(n), narrow<T>(x));
  }
  // 16 copies of 2 bytes: _mm256_stream_si256 needs 32-byte alignment, and the full-vector
  // stores stay 32-byte aligned once the first is.
  static constexpr std::uintptr_t kStreamAlignment = 32;
  static void fence() { _mm_sfence(); }

  struct Acc {
    __m512d low, high;
  };
  static Acc acc_zero() { return Acc{_mm512_setzero_pd(), _mm512_setzero_pd()}; }
  static void acc_squares(Acc& acc, V x) {
    const __m512d low = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d high =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    acc.low = _mm512_fmadd_pd(low, low, acc.low);
    acc.high = _mm512_fmadd_pd(high, high, acc.high);
  }
  static double acc_sum(const Acc& acc) {
    return _mm512_reduce_add_pd(_mm512_add_pd(acc.low, acc.high));
  }
  using Flags = __mmask16;
  static Flags flags_zero() { return 0; }
  static void flags_add(Flags& flags, V x) {
    const __m512i exponent = _mm512_set1_epi32(0x7f80'0000);
    const __m512i bits = _mm512_and_si512(_mm512_castps_si512(x), exponent);
    flags = static_cast<Flags>(flags | _mm512_cmpeq_epi32_mask(bits, exponent));
  }
  static bool flags_any(Flags flags) { return flags != 0; }
};

}  // namespace

const KernelTable& avx512_kernels() {
  static const KernelTable table = make_kernel_table<Avx512>();
  return table;
}

}  // namespace strata::cpu_adam::detail
