// ISA choice and the worker arena: names round-trip, the best level is supported, forcing a
// level works; Workers refuses bad thread counts and NUMA nodes with a UserError and binds to a
// real node.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "cpu_adam/isa.h"
#include "cpu_adam/optimizer.h"
#include "cpu_adam/workers.h"
#include "tests/cpu_adam/reference.h"

namespace strata::cpu_adam {
namespace {

TEST(Isa, NamesRoundTrip) {
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
    EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  }
  EXPECT_FALSE(parse_isa("avx"));
  EXPECT_FALSE(parse_isa(""));
  EXPECT_FALSE(parse_isa("AVX512"));
}

TEST(Isa, BestIsSupportedAndScalarAlwaysIs) {
  EXPECT_TRUE(isa_supported(best_isa()));
  EXPECT_TRUE(isa_supported(Isa::scalar));
  // Levels are nested: a CPU with AVX-512 kernels also runs the AVX2 ones.
  if (isa_supported(Isa::avx512)) {
    EXPECT_TRUE(isa_supported(Isa::avx2));
  }
}

TEST(Isa, SetActiveIsaSwitchesLevel) {
  testing::IsaGuard guard;
  for (Isa isa : testing::supported_isas()) {
    set_active_isa(isa);
    EXPECT_EQ(active_isa(), isa);
  }
}

TEST(Workers, RefusesNegativeThreadCount) {
  try {
    Workers workers(WorkersOptions{.threads = -1});
    FAIL() << "accepted -1 threads";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("-1"), std::string::npos);
    EXPECT_EQ(error.exit_status(), 2);
  }
}

TEST(Workers, RefusesMissingNumaNode) {
  try {
    Workers workers(WorkersOptions{.threads = 1, .numa_node = 4096});
    FAIL() << "accepted NUMA node 4096";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("NUMA node 4096"), std::string::npos);
    EXPECT_NE(error.fix().find("from 0 to"), std::string::npos);
  }
}

TEST(Workers, BindsToNodeZeroAndRunsSteps) {
  Workers workers(WorkersOptions{.threads = 0, .numa_node = 0});
  EXPECT_GE(workers.thread_count(), 1);
  EXPECT_NE(workers.binding().find("numa node 0"), std::string::npos);
  const std::size_t n = 2 * kTileElements + 3;
  std::vector<float> p(n, 1.0f), g(n, 0.5f), m(n, 0.0f), v(n, 0.0f);
  std::vector<bf16> copy(n);
  workers.run([&] { step<float, bf16>(AdamConfig{}, 1, p, g, m, v, copy, 1.0f); });
  // The first Adam step moves every parameter by lr against the gradient's sign.
  EXPECT_NEAR(p[0], 1.0f - 1e-3f, 1e-6f);
  EXPECT_EQ(p[n - 1], p[0]);
  EXPECT_EQ(copy[n - 1].bits, to_bf16(p[n - 1]).bits);
}

TEST(Workers, DefaultThreadCountIsPositive) {
  Workers workers(WorkersOptions{});
  EXPECT_GE(workers.thread_count(), 1);
  EXPECT_EQ(workers.binding(), "unbound");
}

}  // namespace
}  // namespace strata::cpu_adam
