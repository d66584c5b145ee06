// Gradients on NVMe written behind the reducer's queue (engine/zero/grad_reducer.h,
// docs/memory.md): each module's final piece is written while the queue goes on, read back right
// by the optimizer's grads(), and a write that fails fails the end of backward with the module it
// belonged to and the fix.
#include "engine/zero/grad_reducer.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/timeline.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/memory/stream_ordered_memory.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "gpu/process_group.h"
#include "gpu/stream.h"
#include "tests/engine/test_world.h"

namespace strata::engine::zero {
namespace {

using ::testing::HasSubstr;

// One rank's stage-3 reducer with its gradients in a swap file under the test's temporary
// directory (or, with `to_nvme` false, in CPU memory), each module's gradients set to
// (m + 1) x (micro-batch + 1) in its backward.
struct Fixture {
  explicit Fixture(std::vector<std::int64_t> module_sizes, aio::FaultPlan faults = {},
                   bool to_nvme = true)
      : device(gpu::create_host_device({})),
        ops(gpu::create_ops(*device)),
        comm(gpu::create_comm(engine::testing::test_world(), *device)),
        layout(specs(module_sizes), 1),
        memory(*device) {
    memory::NvmeStoreOptions store_options;
    store_options.nvme_path = ::testing::TempDir();
    // ctest runs test cases in parallel: each gets its own swap directory.
    store_options.job_name =
        std::string("reducer-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    store_options.faults = std::move(faults);
    store = std::make_unique<memory::NvmeStore>(store_options);
    pool = std::make_unique<memory::PinnedPool>(*device);
    GradReducerOptions options;
    options.stage = 3;
    options.to_host = true;
    options.to_nvme = to_nvme;
    options.store = to_nvme ? store.get() : nullptr;
    options.pool = pool.get();
    options.book = &book;
    options.largest_read = layout.partition_numel();
    std::vector<std::string> names;
    for (std::size_t m = 0; m < module_sizes.size(); ++m)
      names.push_back(fmt::format("m{}", m));
    reducer = std::make_unique<GradReducer>(*device, *ops, *comm, device->compute_stream(), layout,
                                            memory, names, options);
    pool->open();
    if (to_nvme) store->open(pool->pinned_arena());
    reducer->open();
  }
  ~Fixture() {
    try {
      device->synchronize();
    } catch (const std::exception&) {
      // The test has looked at the stream's error already.
    }
    reducer.reset();  // the memory then frees its buffers as it goes, errors or not
  }

  static std::vector<std::vector<ParamSpec>> specs(const std::vector<std::int64_t>& sizes) {
    std::vector<std::vector<ParamSpec>> modules;
    for (std::size_t m = 0; m < sizes.size(); ++m)
      modules.push_back({ParamSpec{fmt::format("w{}", m), {sizes[m]}}});
    return modules;
  }

  // One step's backward over `micro_batches`: modules in reverse, each writing
  // (m + 1) x (micro-batch + 1) into its gradients.
  void backward(int micro_batches = 1) {
    reducer->begin_step();
    gpu::Stream& stream = device->compute_stream();
    for (int micro = 0; micro < micro_batches; ++micro) {
      for (int m = layout.module_count(); m-- > 0;) {
        float* grads = reducer->grads(m)[0].f32();
        const std::int64_t numel = layout.tensors(m)[0].numel;
        const auto value = static_cast<float>((m + 1) * (micro + 1));
        stream.launch([grads, numel, value] { std::fill(grads, grads + numel, value); });
        reducer->module_done(m, micro + 1 == micro_batches);
      }
    }
  }

  std::unique_ptr<gpu::Device> device;
  std::unique_ptr<gpu::Ops> ops;
  std::unique_ptr<gpu::Comm> comm;
  FlatLayout layout;
  memory::StreamOrderedMemory memory;
  std::unique_ptr<memory::NvmeStore> store;
  std::unique_ptr<memory::PinnedPool> pool;
  memory::Residency book;
  std::unique_ptr<GradReducer> reducer;
};

// Three modules through two piece buffers: the third waits for the first's write before it
// reuses its buffer; the norm and every gradient read back are the values written.
TEST(GradReducerSwap, ShardsWrittenBehindReadBackAsWritten) {
  Fixture f({3000, 5000, 7000});
  f.backward();
  const cpu_adam::GradStats stats = f.reducer->global_stats();
  EXPECT_DOUBLE_EQ(stats.sum_squares, 3000.0 * 1 + 5000.0 * 4 + 7000.0 * 9);
  EXPECT_FALSE(stats.has_inf_or_nan);
  for (int m = 0; m < f.layout.module_count(); ++m) {
    const ModuleSlice& slice = f.layout.module(m);
    const std::span<const std::byte> bytes =
        f.reducer->grads(Range{slice.partition_offset, slice.partition_offset + slice.numel});
    const auto* grads = reinterpret_cast<const float*>(bytes.data());
    for (std::int64_t i = 0; i < f.layout.tensors(m)[0].numel; ++i)
      ASSERT_EQ(grads[i], static_cast<float>(m + 1)) << "module " << m << " element " << i;
  }
}

// Every write fails (the reducer is the store's only user): the third module needs the buffer of
// the first (m2's, backward's first module), and the queue stops there, naming m2 and the fix;
// the end of backward reports it. The compute stream never ran any of it.
TEST(GradReducerSwap, AFailedWriteIsNamedWhenItsBufferIsNeeded) {
  Fixture f({3000, 5000, 7000}, aio::FaultPlan().fail_randomly(1.0, EIO));
  f.backward();
  EXPECT_NO_THROW(f.device->compute_stream().synchronize());
  try {
    static_cast<void>(f.reducer->global_stats());
    FAIL() << "the failed gradient write was not reported";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("swapping the gradients of m2 failed"));
    EXPECT_THAT(error.fix(), HasSubstr("then run the step again"));
  }
}

// With two modules no buffer is needed twice: their failed writes are still in flight when
// backward ends, and the end of backward (the gradient norm) reports them.
TEST(GradReducerSwap, AFailedLastWriteFailsTheEndOfBackward) {
  Fixture f({3000, 5000}, aio::FaultPlan().fail_randomly(1.0, EIO));
  f.backward();
  try {
    static_cast<void>(f.reducer->global_stats());
    FAIL() << "the failed gradient write was not reported";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("swapping the gradients failed"));
    EXPECT_THAT(error.fix(), HasSubstr("then run the step again"));
  }
}

// Modules larger than a piece (4 Mi elements) come down through the three-slot staging ring in
// several pieces, the engine's thread reusing a slot once the queue is done with it; over two
// micro-batches the first contribution lands straight in the CPU partition (or is written to the
// swap file) and the second is added to it. Every element and the norm are exact.
TEST(GradReducerPieces, ModulesLargerThanAPieceLandWholeOverTwoMicroBatches) {
  const std::vector<std::int64_t> sizes = {kGradPieceElements + 4096, 2 * kGradPieceElements + 1};
  for (const bool to_nvme : {false, true}) {
    SCOPED_TRACE(to_nvme ? "on NVMe" : "in CPU memory");
    Fixture f(sizes, {}, to_nvme);
    f.backward(2);
    const cpu_adam::GradStats stats = f.reducer->global_stats();
    double expected = 0;
    for (std::size_t m = 0; m < sizes.size(); ++m) {
      const double value = 3.0 * static_cast<double>(m + 1);  // (m + 1) x (1 + 2)
      expected += static_cast<double>(sizes[m]) * value * value;
    }
    EXPECT_DOUBLE_EQ(stats.sum_squares, expected);
    for (int m = 0; m < f.layout.module_count(); ++m) {
      const ModuleSlice& slice = f.layout.module(m);
      const std::span<const std::byte> bytes =
          f.reducer->grads(Range{slice.partition_offset, slice.partition_offset + slice.numel});
      const auto* grads = reinterpret_cast<const float*>(bytes.data());
      const auto value = static_cast<float>(3 * (m + 1));
      for (std::int64_t i = 0; i < slice.numel; ++i)
        ASSERT_EQ(grads[i], value) << "module " << m << " element " << i;
    }
    EXPECT_EQ(f.device->compute_stream().host_functions(), 2 * 2);  // the test's own fills only
  }
}

// A contribution that is final as it comes (one micro-batch a step) has its sum of squares taken
// on the device before it goes down: the CPU queue scans none of it, and the norm is the same
// (an inf or NaN included). Over two micro-batches the sums are formed on the CPU and scanned
// there.
TEST(GradReducerPieces, AContributionFinalAsItComesIsNormedOnTheDevice) {
  const auto scans = [] {
    return std::ranges::count_if(base::timeline().spans(), [](const base::Timeline::Span& span) {
      return span.lane == "gradients" && span.label.starts_with("scan");
    });
  };
  for (const bool to_nvme : {false, true}) {
    SCOPED_TRACE(to_nvme ? "on NVMe" : "in CPU memory");
    {
      Fixture f({3000, 5000, 7000}, {}, to_nvme);
      base::timeline().start();
      f.backward(1);
      const cpu_adam::GradStats stats = f.reducer->global_stats();
      base::timeline().stop();
      EXPECT_DOUBLE_EQ(stats.sum_squares, 3000.0 * 1 + 5000.0 * 4 + 7000.0 * 9);
      EXPECT_FALSE(stats.has_inf_or_nan);
      EXPECT_EQ(scans(), 0);
      // A NaN in one module's gradients comes out of the device's sum.
      f.reducer->begin_step();
      for (int m = f.layout.module_count(); m-- > 0;) {
        float* grads = f.reducer->grads(m)[0].f32();
        const std::int64_t numel = f.layout.tensors(m)[0].numel;
        const float value = m == 1 ? std::numeric_limits<float>::quiet_NaN() : 1.0f;
        f.device->compute_stream().launch(
            [grads, numel, value] { std::fill(grads, grads + numel, value); });
        f.reducer->module_done(m, true);
      }
      EXPECT_TRUE(f.reducer->global_stats().has_inf_or_nan);
    }
    Fixture f({3000, 5000, 7000}, {}, to_nvme);
    base::timeline().start();
    f.backward(2);
    const cpu_adam::GradStats stats = f.reducer->global_stats();
    base::timeline().stop();
    EXPECT_DOUBLE_EQ(stats.sum_squares, 9.0 * (3000.0 * 1 + 5000.0 * 4 + 7000.0 * 9));
    EXPECT_EQ(scans(), 3);  // one piece a module
  }
}

}  // namespace
}  // namespace strata::engine::zero
