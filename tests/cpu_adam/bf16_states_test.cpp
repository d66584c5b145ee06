// bf16 master weights and moments (DeepSpeed's bf16.bf16_master_weights_and_grads and
// bf16_optimizer_states) at every SIMD level this CPU has: a bf16 state is widened, stepped with
// the fp32 math and rounded to nearest even, so each new state must be exactly the fp32 kernel's
// result on the widened states, rounded to bf16 (and the parameter copy exactly the fp32 kernel's
// copy), at the scalar reference level as at AVX2 and AVX-512 (whose fp32 kernels
// optimizer_test.cpp holds to the double reference); and the same bits for any thread count.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_adam/optimizer.h"
#include "cpu_adam/workers.h"
#include "tests/cpu_adam/reference.h"

namespace strata::cpu_adam {
namespace {

using testing::IsaGuard;
using testing::supported_isas;

constexpr float kHuge = 1e18f;

// Values a bf16 holds exactly (awkward ones: zeros, denormals, tiny and huge, both signs).
std::vector<float> bf16_values(std::size_t n, std::uint32_t seed, bool non_negative) {
  std::vector<float> values = testing::awkward_values(n, seed, kHuge);
  for (float& value : values) {
    if (non_negative) value = std::abs(value);
    value = to_float(to_bf16(value));
  }
  return values;
}

template <class T>
std::vector<T> as_states(const std::vector<float>& values) {
  if constexpr (std::is_same_v<T, float>) {
    return values;
  } else {
    std::vector<bf16> out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
      out[i] = to_bf16(values[i]);
    return out;
  }
}

// The bits state type T stores for the fp32 value `x`.
template <class T>
std::uint32_t stored_bits(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<std::uint32_t>(x);
  } else {
    return to_bf16(x).bits;
  }
}

template <class T>
std::uint32_t bits_of(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<std::uint32_t>(x);
  } else {
    return x.bits;
  }
}

// The fp32 step's results (over the widened states) and the step with states of type P and S.
struct Inputs {
  std::vector<float> g, p, m, v;
};

Inputs inputs(std::size_t n) {
  return {testing::awkward_values(n, 21, kHuge), bf16_values(n, 22, false),
          bf16_values(n, 23, false), bf16_values(n, 24, true)};
}

template <class P, class S>
void expect_rounded(const std::vector<float>& wide, const std::vector<P>& narrow,
                    const std::string& what) {
  for (std::size_t i = 0; i < wide.size(); ++i)
    ASSERT_EQ(bits_of(narrow[i]), stored_bits<P>(wide[i])) << what << " i=" << i;
}

template <class P, class S>
void check_adam(Isa isa, const AdamConfig& config, std::int64_t t, std::size_t n) {
  const std::string where = std::string(isa_name(isa)) + " adam n=" + std::to_string(n) +
                            " t=" + std::to_string(t) + " p " + (sizeof(P) == 2 ? "bf16" : "fp32") +
                            " moments " + (sizeof(S) == 2 ? "bf16" : "fp32");
  const Inputs in = inputs(n);
  std::vector<float> p = in.p, m = in.m, v = in.v;
  std::vector<bf16> copy(n);
  step<float, bf16>(config, t, p, in.g, m, v, copy, 0.5f);
  std::vector<P> p_n = as_states<P>(in.p);
  std::vector<S> m_n = as_states<S>(in.m), v_n = as_states<S>(in.v);
  std::vector<bf16> copy_n(n);
  step<float, bf16, P, S>(config, t, p_n, in.g, m_n, v_n, copy_n, 0.5f);
  expect_rounded<P, S>(p, p_n, where + " p");
  expect_rounded<S, S>(m, m_n, where + " m");
  expect_rounded<S, S>(v, v_n, where + " v");
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(copy_n[i].bits, copy[i].bits) << where << " copy i=" << i;
}

template <class P, class S>
void check_adagrad_and_lion(Isa isa, std::size_t n) {
  const std::string where = std::string(isa_name(isa)) + " n=" + std::to_string(n);
  const Inputs in = inputs(n);
  {
    std::vector<float> p = in.p, v = in.v;
    step<float, NoCopy>(AdagradConfig{.weight_decay = 0.01f}, 2, p, in.g, v, {}, 0.5f);
    std::vector<P> p_n = as_states<P>(in.p);
    std::vector<S> v_n = as_states<S>(in.v);
    step<float, NoCopy, P, S>(AdagradConfig{.weight_decay = 0.01f}, 2, p_n, in.g, v_n, {}, 0.5f);
    expect_rounded<P, S>(p, p_n, where + " adagrad p");
    expect_rounded<S, S>(v, v_n, where + " adagrad v");
  }
  {
    std::vector<float> p = in.p, m = in.m;
    step<float, NoCopy>(LionConfig{.weight_decay = 0.1f}, 2, p, in.g, m, {}, 0.5f);
    std::vector<P> p_n = as_states<P>(in.p);
    std::vector<S> m_n = as_states<S>(in.m);
    step<float, NoCopy, P, S>(LionConfig{.weight_decay = 0.1f}, 2, p_n, in.g, m_n, {}, 0.5f);
    expect_rounded<P, S>(p, p_n, where + " lion p");
    expect_rounded<S, S>(m, m_n, where + " lion m");
  }
}

template <class P, class S>
void check_everywhere() {
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    for (bool adam_w_mode : {true, false}) {
      AdamConfig config;
      config.adam_w_mode = adam_w_mode;
      config.weight_decay = 0.01f;
      check_adam<P, S>(isa, config, 1, 1023);
      check_adam<P, S>(isa, config, 5, 17);
    }
    for (std::size_t n :
         {std::size_t{1}, std::size_t{15}, static_cast<std::size_t>(kTileElements) + 3})
      check_adam<P, S>(isa, AdamConfig{}, 3, n);
    check_adagrad_and_lion<P, S>(isa, 1029);
  }
}

TEST(Bf16States, MasterAndMomentsInBf16AreTheRoundedFp32Step) {
  check_everywhere<bf16, bf16>();
}

TEST(Bf16States, Bf16MasterWithFp32MomentsIsTheRoundedFp32Step) {
  check_everywhere<bf16, float>();
}

TEST(Bf16States, Fp32MasterWithBf16MomentsIsTheRoundedFp32Step) {
  check_everywhere<float, bf16>();
}

// Three steps over three tiles and a bit, in arenas of 1, 2 and 5 threads: the same bits.
TEST(Bf16States, BitwiseIdenticalForAnyThreadCount) {
  IsaGuard guard;
  const std::size_t n = 3 * kTileElements + 11;
  const Inputs in = inputs(n);
  for (Isa isa : supported_isas()) {
    set_active_isa(isa);
    auto run = [&](int threads) {
      std::vector<bf16> p = as_states<bf16>(in.p), m = as_states<bf16>(in.m),
                        v = as_states<bf16>(in.v);
      Workers workers(WorkersOptions{.threads = threads});
      workers.run([&] {
        for (std::int64_t t = 1; t <= 3; ++t)
          step<float, NoCopy, bf16, bf16>(AdamConfig{.weight_decay = 0.01f}, t, p, in.g, m, v, {},
                                          0.5f);
      });
      std::vector<std::uint16_t> bits;
      for (const std::vector<bf16>* state : {&p, &m, &v})
        for (bf16 x : *state)
          bits.push_back(x.bits);
      return bits;
    };
    const std::vector<std::uint16_t> one = run(1);
    for (int threads : {2, 5})
      EXPECT_EQ(one, run(threads)) << isa_name(isa) << " threads=" << threads;
  }
}

}  // namespace
}  // namespace strata::cpu_adam
