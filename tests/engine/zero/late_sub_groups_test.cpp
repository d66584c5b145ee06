// The sub-groups left after backward, stepped on LateSubGroups' thread: the sink hears every
// range expected before any is committed, the ranges come first to last, the bits are those of
// the plain step, and a parameter tier's reader on this thread gathers each module once its
// sub-groups are committed. A failure on the thread comes out of settle(), reaches the sink's
// readers with the same cause and fix, and leaves the optimizer refusing, naming it.
#include "engine/zero/late_sub_groups.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "cpu_adam/half.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/zero/param_tier.h"
#include "gpu/open_device.h"
#include "gpu/stream.h"
#include "tests/engine/random_floats.h"
#include "tests/engine/test_offload.h"
#include "tests/engine/zero/error_of.h"

namespace strata::engine::zero {
namespace {

using test_values::random_floats;
using ::testing::HasSubstr;

// Six modules of uneven sizes: shards of 4096, 6144, 2048, 8192, 2048 and 4096 elements, 26624 in
// all, in sub-groups of 4096: seven sub-groups, several of them spanning a module boundary.
FlatLayout six_modules() {
  std::vector<std::vector<ParamSpec>> modules;
  for (std::int64_t numel : {3000, 5000, 2048, 7000, 100, 4000})
    modules.push_back({ParamSpec{fmt::format("m{}.w", modules.size()), {numel}}});
  return FlatLayout(modules, 1);
}

constexpr std::int64_t kSubGroup = 4096;

StepHyperparameters hyper() {
  StepHyperparameters result;
  result.lr = 1e-2;
  result.step = 1;
  result.grad_scale = 0.5f;
  return result;
}

// A sink over the whole 16-bit copy that records, in order, what the step tells it.
class RecordingSink final : public ParamSink {
 public:
  explicit RecordingSink(std::vector<std::uint16_t>& copy)
      : memory_(std::as_writable_bytes(std::span(copy)), 2) {}
  std::span<std::byte> values(Range range) override { return memory_.values(range); }
  void commit(Range range) override { note(fmt::format("commit {}", range.begin)); }
  void expect(Range range) override { note(fmt::format("expect {}", range.begin)); }
  void forgo_expected(const std::string& why, const std::string& fix) override {
    note(fmt::format("forgo: {} / {}", why, fix));
  }
  std::vector<std::string> events() {
    const std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  void note(std::string event) {
    const std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  PartitionMemory memory_;
  std::mutex mutex_;
  std::vector<std::string> events_;
};

class LateSubGroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = gpu::create_host_device({});
    master_ = random_floats(layout_.partition_numel(), 1, 1.0f);
    grads_ = random_floats(layout_.partition_numel(), 2, 0.1f);
    for (float value : master_)
      initial_copy_.push_back(cpu_adam::to_bf16(value).bits);
  }

  OptimizerOffloadOptions options(OffloadDevice where, aio::FaultPlan faults = {}) const {
    OptimizerOffloadOptions result;
    result.device = where;
    result.sub_group_size = kSubGroup;
    result.buffer_count = 3;
    result.nvme.nvme_path = ::testing::TempDir();
    result.nvme.job_name =
        std::string("late-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    result.nvme.faults = std::move(faults);
    return result;
  }
  // The plain step's new parameters (bf16 bits of the whole partition).
  std::vector<std::uint16_t> plain_copy() {
    TestOffload offload(*device_, optimizer_, master_, options(OffloadDevice::cpu));
    std::vector<std::uint16_t> copy = initial_copy_;
    offload.step(hyper(), grads_, ParamCopy::bf16, copy);
    return copy;
  }
  // Every sub-group, first to last.
  std::vector<int> all_sub_groups(const TestOffload& offload) const {
    std::vector<int> order(offload.sub_groups().size());
    std::iota(order.begin(), order.end(), 0);
    return order;
  }

  FlatLayout layout_ = six_modules();
  Optimizer optimizer_{[] {
    OptimizerConfig c;
    c.type = OptimizerType::adamw;
    c.weight_decay = 0.01;
    return c;
  }()};
  std::unique_ptr<gpu::Device> device_;
  std::vector<float> master_, grads_;
  std::vector<std::uint16_t> initial_copy_;
};

TEST_F(LateSubGroupsTest, NoSubGroupsIsNothing) {
  TestOffload offload(*device_, optimizer_, master_, options(OffloadDevice::cpu));
  std::vector<std::uint16_t> copy = initial_copy_;
  RecordingSink sink(copy);
  PartitionGrads grads(grads_);
  LateSubGroups late(offload);
  late.start(hyper(), StepIo{&grads, ParamCopy::bf16, &sink}, {});
  EXPECT_FALSE(late.running());
  late.settle();
  EXPECT_TRUE(sink.events().empty());
  EXPECT_EQ(copy, initial_copy_);
}

// Every range is expected before the thread starts, then committed first to last, and the new
// parameters are the plain step's to the bit.
TEST_F(LateSubGroupsTest, ExpectsEveryRangeThenCommitsThemFirstToLast) {
  for (OffloadDevice where : {OffloadDevice::cpu, OffloadDevice::nvme}) {
    SCOPED_TRACE(to_string(where));
    TestOffload offload(*device_, optimizer_, master_, options(where));
    std::vector<std::uint16_t> copy = initial_copy_;
    RecordingSink sink(copy);
    PartitionGrads grads(grads_);
    LateSubGroups late(offload);
    late.start(hyper(), StepIo{&grads, ParamCopy::bf16, &sink}, all_sub_groups(offload));
    EXPECT_TRUE(late.running());
    late.settle();
    EXPECT_FALSE(late.running());
    std::vector<std::string> expected;
    for (const char* what : {"expect", "commit"}) {
      for (const Range& range : offload.sub_groups())
        expected.push_back(fmt::format("{} {}", what, range.begin));
    }
    EXPECT_EQ(sink.events(), expected);
    EXPECT_EQ(copy, plain_copy());
  }
}

// A parameter tier in CPU memory as the sink, read on this thread module by module while the
// thread steps: each module is gathered once its sub-groups are committed, with the step's
// values (the tier's fence orders the two threads, nothing else does).
TEST_F(LateSubGroupsTest, ATiersReaderGathersEachModuleOnceItsSubGroupsAreCommitted) {
  memory::Residency book;
  memory::PinnedPool pool(*device_);
  ParamTierOptions tier_options;
  tier_options.device = OffloadDevice::cpu;
  tier_options.pool = &pool;
  tier_options.book = &book;
  ParamTier tier(*device_, layout_, tier_options);
  pool.open();
  tier.open();
  {
    std::span<std::byte> values = tier.values(Range{0, layout_.partition_numel()});
    std::memcpy(values.data(), initial_copy_.data(), values.size());
    tier.commit(Range{0, layout_.partition_numel()});
  }
  TestOffload offload(*device_, optimizer_, master_, options(OffloadDevice::cpu));
  PartitionGrads grads(grads_);
  LateSubGroups late(offload);
  late.start(hyper(), StepIo{&grads, ParamCopy::bf16, &tier}, all_sub_groups(offload));
  const std::vector<std::uint16_t> expected = plain_copy();
  gpu::Stream& stream = device_->compute_stream();
  for (int m = 0; m < layout_.module_count(); ++m) {
    const ModuleSlice& slice = layout_.module(m);
    gpu::DeviceBuffer target = device_->allocate(slice.shard_numel * 2, "gathered shard");
    tier.wait_committed(m, stream);
    tier.fetch(m, stream, target.data());
    stream.synchronize();
    const auto* bits = target.as<const std::uint16_t>();
    for (std::int64_t i = 0; i < slice.shard_numel; ++i) {
      ASSERT_EQ(bits[i], expected[static_cast<std::size_t>(slice.partition_offset + i)])
          << "module " << m << " element " << i;
    }
  }
  late.settle();
  EXPECT_LE(tier.commit_waits(), layout_.module_count());
}

// Completions 0..6 write the initial states; 7.. are the step's. A swap-file error on the thread
// comes out of settle(), the sink hears it with its fix, the states are inconsistent, and every
// later call names that first failure, whatever is marked after it.
TEST_F(LateSubGroupsTest, AFailureOnTheThreadReachesSettleTheSinkAndEveryLaterCall) {
  TestOffload offload(*device_, optimizer_, master_,
                      options(OffloadDevice::nvme, aio::FaultPlan(3).fail(9, EIO)));
  std::vector<std::uint16_t> copy = initial_copy_;
  RecordingSink sink(copy);
  PartitionGrads grads(grads_);
  LateSubGroups late(offload);
  late.start(hyper(), StepIo{&grads, ParamCopy::bf16, &sink}, all_sub_groups(offload));
  const UserError failure = error_of([&] { late.settle(); });
  EXPECT_THAT(failure.what(), HasSubstr(strerror(EIO)));
  EXPECT_THAT(failure.fix(), HasSubstr("training cannot continue from this state"));
  EXPECT_FALSE(late.running());
  EXPECT_TRUE(offload.inconsistent());
  const std::vector<std::string> events = sink.events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), fmt::format("forgo: {} / {}", failure.what(), failure.fix()));

  offload.mark_inconsistent("a later cause");
  for (int call = 0; call < 2; ++call) {
    const UserError later = error_of([&] { offload.step(hyper(), grads_, ParamCopy::bf16, copy); });
    EXPECT_THAT(later.what(), HasSubstr("inconsistent since an earlier step failed"));
    EXPECT_THAT(later.what(), HasSubstr(strerror(EIO)));
    EXPECT_THAT(later.what(), ::testing::Not(HasSubstr("a later cause")));
  }
}

// abandon() waits for the thread and logs its failure instead of throwing it.
TEST_F(LateSubGroupsTest, AbandonWaitsAndSwallowsTheFailure) {
  TestOffload offload(*device_, optimizer_, master_,
                      options(OffloadDevice::nvme, aio::FaultPlan(3).fail(9, EIO)));
  std::vector<std::uint16_t> copy = initial_copy_;
  RecordingSink sink(copy);
  PartitionGrads grads(grads_);
  LateSubGroups late(offload);
  late.start(hyper(), StepIo{&grads, ParamCopy::bf16, &sink}, all_sub_groups(offload));
  late.abandon();
  EXPECT_FALSE(late.running());
  EXPECT_TRUE(offload.inconsistent());
  late.settle();  // nothing left to wait for
}

}  // namespace
}  // namespace strata::engine::zero
