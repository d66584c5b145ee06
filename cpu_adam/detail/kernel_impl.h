#pragma once

// The one tile loop and the optimizer math, written once over an ISA description `I` and
// instantiated by each SIMD translation unit with its own I (defined there in an anonymous
// namespace, so every instantiation has internal linkage and the linker can never hand AVX-512
// code to a baseline caller). Include only from kernels_avx512.cpp, kernels_avx2.cpp and
// adam_scalar.cpp.
//
// The update rules themselves (AdamOp, AdagradOp, LionOp) are in update_rules.h, which the CUDA
// optimizer shares. I provides: V (a vector of kWidth floats); set1, add, mul, sqrt,
// fmadd(a, b, c) = a*b+c,
// quotient(a, b) = a / b within one ulp (a reciprocal estimate refined by one Newton-Raphson
// step where that is cheaper than the divider, falling back to a true division for the lanes the
// estimate cannot handle: zero, subnormal and infinite divisors, quotients that overflow),
// sign_step(c, s) = s with its sign flipped when c's sign bit is set; load<T>(ptr) and
// load_partial<T>(ptr, n) widening element type T to V (zeros past n); store(ptr, V),
// store_partial; store_copy<T>(ptr, V, stream) and store_copy_partial narrowing to T with round to
// nearest even; kStreamAlignment (bytes a non-temporal copy store needs, 0: none), fence(); and for
// the scan Acc, acc_zero, acc_squares, acc_sum, Flags, flags_zero, flags_add (any exponent all
// ones), flags_any.

#include <cstdint>

#include "cpu_adam/detail/kernels.h"
#include "cpu_adam/detail/update_rules.h"

namespace strata::cpu_adam::detail {

// Element type tags: kKind 0 fp32, 1 bf16, 2 fp16; NoneTag has no storage to write.
struct F32 {
  using Storage = float;
  static constexpr int kKind = 0;
  static constexpr bool kCopy = true;
};
struct Bf16 {
  using Storage = std::uint16_t;
  static constexpr int kKind = 1;
  static constexpr bool kCopy = true;
};
struct Fp16 {
  using Storage = std::uint16_t;
  static constexpr int kKind = 2;
  static constexpr bool kCopy = true;
};
struct NoneTag {
  using Storage = unsigned char;
  static constexpr int kKind = -1;
  static constexpr bool kCopy = false;
};

// The bound: the same traffic as the optimizers, one add per array.
template <class I, bool kM, bool kV>
struct TouchOp {
  static constexpr bool kUsesM = kM;
  static constexpr bool kUsesV = kV;
  using V = typename I::V;
  void operator()(V& p, V g, V& m, V& v) const {
    p = I::add(p, g);
    if constexpr (kM) m = I::add(m, g);
    if constexpr (kV) v = I::add(v, g);
  }
};

// A master or moment element: fp32 stored as is, bf16 widened on load and rounded to nearest
// even on store (the same rounding as the parameter copy, without non-temporal stores: the
// states are read again by the next step's write-back from this cache).
template <class I, class T>
inline typename I::V load_state(const void* base, std::int64_t i) {
  return I::template load<T>(static_cast<const typename T::Storage*>(base) + i);
}
template <class I, class T>
inline typename I::V load_state_partial(const void* base, std::int64_t i, int n) {
  return I::template load_partial<T>(static_cast<const typename T::Storage*>(base) + i, n);
}
template <class I, class T>
inline void store_state(void* base, std::int64_t i, typename I::V x) {
  auto* at = static_cast<typename T::Storage*>(base) + i;
  if constexpr (T::kKind == 0) {
    I::store(at, x);
  } else {
    I::template store_copy<T>(at, x, false);
  }
}
template <class I, class T>
inline void store_state_partial(void* base, std::int64_t i, typename I::V x, int n) {
  auto* at = static_cast<typename T::Storage*>(base) + i;
  if constexpr (T::kKind == 0) {
    I::store_partial(at, x, n);
  } else {
    I::template store_copy_partial<T>(at, x, n);
  }
}

// Loads, updates and stores kWidth elements at i (or the n < kWidth left at the end of a tile).
// P is the master parameters' type, S the moments'; the math is fp32 whatever they are.
template <class I, class Op, class G, class H, class P, class S, bool kPartial>
inline void stream_block(const Op& op, const Arrays& a, std::int64_t i, int n, bool stream) {
  using V = typename I::V;
  const auto* g = static_cast<const typename G::Storage*>(a.g) + i;
  V p, grad, m{}, v{};
  if constexpr (kPartial) {
    p = load_state_partial<I, P>(a.p, i, n);
    grad = I::template load_partial<G>(g, n);
    if constexpr (Op::kUsesM) m = load_state_partial<I, S>(a.m, i, n);
    if constexpr (Op::kUsesV) v = load_state_partial<I, S>(a.v, i, n);
  } else {
    p = load_state<I, P>(a.p, i);
    grad = I::template load<G>(g);
    if constexpr (Op::kUsesM) m = load_state<I, S>(a.m, i);
    if constexpr (Op::kUsesV) v = load_state<I, S>(a.v, i);
  }
  op(p, grad, m, v);
  if constexpr (kPartial) {
    store_state_partial<I, P>(a.p, i, p, n);
    if constexpr (Op::kUsesM) store_state_partial<I, S>(a.m, i, m, n);
    if constexpr (Op::kUsesV) store_state_partial<I, S>(a.v, i, v, n);
    if constexpr (H::kCopy) {
      I::template store_copy_partial<H>(static_cast<typename H::Storage*>(a.p_out) + i, p, n);
    }
  } else {
    store_state<I, P>(a.p, i, p);
    if constexpr (Op::kUsesM) store_state<I, S>(a.m, i, m);
    if constexpr (Op::kUsesV) store_state<I, S>(a.v, i, v);
    if constexpr (H::kCopy) {
      I::template store_copy<H>(static_cast<typename H::Storage*>(a.p_out) + i, p, stream);
    }
  }
}

// The one tile loop every optimizer and the bound share. The parameter copy is written with
// non-temporal stores: it is read next by the H2D copy engine, not by this CPU, so caching it
// would only evict the states, and a regular store would first read each line in (2 more bytes
// of traffic per parameter). Those stores need the copy's vector addresses aligned to
// I::kStreamAlignment bytes; where the caller's buffer is not (a std::vector's data sits 16 bytes
// past a 32-byte boundary, a sub-group may start anywhere) the elements before the first aligned
// address go through one partial block. Every element is computed on its own, so how
// elements are grouped into vectors changes no result.
template <class I, class Op, class G, class H, class P, class S>
void stream_tile(const Op& op, const Arrays& a, std::int64_t begin, std::int64_t end) {
  std::int64_t i = begin;
  bool stream = false;
  if constexpr (H::kCopy && I::kStreamAlignment > 0) {
    constexpr std::uintptr_t element = sizeof(typename H::Storage);
    const auto address =
        reinterpret_cast<std::uintptr_t>(static_cast<typename H::Storage*>(a.p_out) + begin);
    // E.g. bf16 on AVX-512 at an address 16 mod 32: (32 - 16) / 2 = 8 elements, then aligned.
    const std::uintptr_t misaligned = address % I::kStreamAlignment;
    const auto peel = static_cast<std::int64_t>(
        misaligned == 0 ? 0 : (I::kStreamAlignment - misaligned) / element);
    if (address % element == 0 && peel < end - begin) {
      if (peel > 0) stream_block<I, Op, G, H, P, S, true>(op, a, i, static_cast<int>(peel), false);
      i += peel;
      stream = true;
    }
  }
  for (; i + I::kWidth <= end; i += I::kWidth) {
    stream_block<I, Op, G, H, P, S, false>(op, a, i, I::kWidth, stream);
  }
  if (i < end) stream_block<I, Op, G, H, P, S, true>(op, a, i, static_cast<int>(end - i), stream);
  if (stream) I::fence();
}

template <class I, class Op, class Args, class G, class H, class P, class S>
void run_optimizer(const Args& args, const Arrays& a, std::int64_t begin, std::int64_t end) {
  const Op op(args);
  stream_tile<I, Op, G, H, P, S>(op, a, begin, end);
}

template <class I, bool kM, bool kV, class G, class H, class P, class S>
void run_membw(const Arrays& a, std::int64_t begin, std::int64_t end) {
  const TouchOp<I, kM, kV> op;
  stream_tile<I, TouchOp<I, kM, kV>, G, H, P, S>(op, a, begin, end);
}

template <class I, class G>
ScanPartial scan_tile(const void* gradients, std::int64_t begin, std::int64_t end) {
  const auto* g = static_cast<const typename G::Storage*>(gradients);
  typename I::Acc acc = I::acc_zero();
  typename I::Flags flags = I::flags_zero();
  std::int64_t i = begin;
  for (; i + I::kWidth <= end; i += I::kWidth) {
    const typename I::V x = I::template load<G>(g + i);
    I::acc_squares(acc, x);
    I::flags_add(flags, x);
  }
  if (i < end) {
    const typename I::V x = I::template load_partial<G>(g + i, static_cast<int>(end - i));
    I::acc_squares(acc, x);
    I::flags_add(flags, x);
  }
  return ScanPartial{I::acc_sum(acc), I::flags_any(flags)};
}

template <class I, class G, class H, class P, class S>
void fill_states(KernelTable& table, int grad, int copy) {
  const int p = P::kKind == 0 ? state_f32 : state_bf16;
  const int s = S::kKind == 0 ? state_f32 : state_bf16;
  table.adam[p][s][grad][copy] = &run_optimizer<I, AdamOp<I>, AdamArgs, G, H, P, S>;
  table.adagrad[p][s][grad][copy] = &run_optimizer<I, AdagradOp<I>, AdagradArgs, G, H, P, S>;
  table.lion[p][s][grad][copy] = &run_optimizer<I, LionOp<I>, LionArgs, G, H, P, S>;
  table.membw[0][0][p][s][grad][copy] = &run_membw<I, false, false, G, H, P, S>;
  table.membw[0][1][p][s][grad][copy] = &run_membw<I, false, true, G, H, P, S>;
  table.membw[1][0][p][s][grad][copy] = &run_membw<I, true, false, G, H, P, S>;
  table.membw[1][1][p][s][grad][copy] = &run_membw<I, true, true, G, H, P, S>;
}

template <class I, class G, class H>
void fill_copy(KernelTable& table, int grad, int copy) {
  fill_states<I, G, H, F32, F32>(table, grad, copy);
  fill_states<I, G, H, F32, Bf16>(table, grad, copy);
  fill_states<I, G, H, Bf16, F32>(table, grad, copy);
  fill_states<I, G, H, Bf16, Bf16>(table, grad, copy);
}

template <class I, class G>
void fill_grad(KernelTable& table, int grad) {
  fill_copy<I, G, NoneTag>(table, grad, copy_none);
  fill_copy<I, G, Bf16>(table, grad, copy_bf16);
  fill_copy<I, G, Fp16>(table, grad, copy_fp16);
  table.scan[grad] = &scan_tile<I, G>;
}

template <class I>
KernelTable make_kernel_table() {
  KernelTable table{};
  fill_grad<I, F32>(table, grad_f32);
  fill_grad<I, Bf16>(table, grad_bf16);
  fill_grad<I, Fp16>(table, grad_fp16);
  return table;
}

}  // namespace strata::cpu_adam::detail
