// strata.overlap_optimizer below the engine: OptimizerOffload's kept sub-groups and undo, and
// OverlappedStep driven by a real CPU queue the way the engine's gradient reducer drives it
// (gradients land module by module, last first, while the thread steps what is final), then
// LateSubGroups stepping what it did not reach. Every
// outcome is compared bit for bit with the plain step after backward, on the CPU tier and on NVMe.

#include "engine/zero/overlapped_step.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "cpu_adam/half.h"
#include "engine/zero/late_sub_groups.h"
#include "gpu/open_device.h"
#include "tests/engine/random_floats.h"
#include "tests/engine/test_offload.h"

namespace strata::engine::zero {
namespace {

namespace fs = std::filesystem;

// Six modules of uneven sizes: shards of 4096, 6144, 2048, 8192, 2048 and 4096 elements (the
// default 2048-element alignment), 26624 in all, in sub-groups of 4096: seven sub-groups, several
// of them spanning a module boundary.
FlatLayout six_modules() {
  std::vector<std::vector<ParamSpec>> modules;
  for (std::int64_t numel : {3000, 5000, 2048, 7000, 100, 4000})
    modules.push_back({ParamSpec{fmt::format("m{}.w", modules.size()), {numel}}});
  return FlatLayout(modules, 1);
}

constexpr std::int64_t kSubGroup = 4096;

using test_values::random_floats;

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

StepHyperparameters hyper(float grad_scale) {
  StepHyperparameters result;
  result.lr = 1e-2;
  result.step = 1;
  result.grad_scale = grad_scale;
  return result;
}

// A sink over the whole 16-bit copy that records, in order, what the step tells it.
class RecordingSink final : public ParamSink {
 public:
  explicit RecordingSink(std::vector<std::uint16_t>& copy)
      : memory_(std::as_writable_bytes(std::span(copy)), 2) {}
  std::span<std::byte> values(Range range) override { return memory_.values(range); }
  void commit(Range range) override { note("commit", range); }
  void expect(Range range) override { note("expect", range); }
  void forgo_expected(const std::string& why, const std::string& fix) override {
    const std::lock_guard lock(mutex_);
    events_.push_back(fmt::format("forgo: {} / {}", why, fix));
  }
  std::vector<std::string> events() {
    const std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  void note(const char* what, Range range) {
    const std::lock_guard lock(mutex_);
    events_.push_back(fmt::format("{} {}", what, range.begin));
  }
  PartitionMemory memory_;
  std::mutex mutex_;
  std::vector<std::string> events_;
};

// Everything a step leaves behind, to compare two runs.
struct Outcome {
  std::vector<float> params, exp_avg, exp_avg_sq;
  std::vector<std::uint16_t> copy;
  bool operator==(const Outcome& other) const {
    return same_bits(params, other.params) && same_bits(exp_avg, other.exp_avg) &&
           same_bits(exp_avg_sq, other.exp_avg_sq) && copy == other.copy;
  }
};

// An overlapped step as the engine runs it: the gradient partition starts at zero and each
// module's slice lands by a job of the queue, last module first, before module_final; `real` is
// what finish() is told, and the sub-groups it names are stepped by a LateSubGroups, settled
// before run() returns.
class Driver {
 public:
  Driver(CpuQueue& landings, const FlatLayout& layout, const std::vector<float>& grads)
      : landings_(landings), layout_(layout), grads_(grads), partition_(grads.size(), 0.0f) {}
  // `sink`: where the new parameters go (null: straight into `copy`).
  OverlapOutcome run(TestOffload& offload, OverlappedStep& step, const StepHyperparameters& guess,
                     const StepHyperparameters* real, std::vector<std::uint16_t>& copy,
                     ParamSink* sink = nullptr) {
    PartitionGrads partition_grads(partition_);
    PartitionMemory memory(std::as_writable_bytes(std::span(copy)), 2);
    const StepIo io{&partition_grads, ParamCopy::bf16, sink ? sink : &memory};
    step.begin(guess, io);
    for (int m = layout_.module_count(); m-- > 0;) {
      const ModuleSlice& slice = layout_.module(m);
      step.module_final(m, landings_.submit([this, slice] {
        std::memcpy(partition_.data() + slice.partition_offset,
                    grads_.data() + slice.partition_offset,
                    static_cast<std::size_t>(slice.shard_numel) * sizeof(float));
      }));
    }
    landings_.drain();
    const OverlapOutcome outcome = step.finish(real);
    LateSubGroups late(offload);
    if (real != nullptr) late.start(*real, io, outcome.unreached);
    late.settle();  // they read partition_ and write the sink
    return outcome;
  }

 private:
  CpuQueue& landings_;
  const FlatLayout& layout_;
  const std::vector<float>& grads_;
  std::vector<float> partition_;
};

class OverlappedStepTest : public ::testing::TestWithParam<OffloadDevice> {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / fmt::format("strata-overlap-test-{}", getpid());
    fs::create_directories(root_);
    device_ = gpu::create_host_device({});
    master_ = random_floats(layout_.partition_numel(), 1, 1.0f);
    grads_ = random_floats(layout_.partition_numel(), 2, 0.1f);
    for (float value : master_)
      initial_copy_.push_back(cpu_adam::to_bf16(value).bits);
  }
  void TearDown() override { fs::remove_all(root_); }

  CpuQueue landings_{"landings", 64};

  OptimizerOffloadOptions options(std::int64_t keep_capacity, const std::string& job) const {
    OptimizerOffloadOptions result;
    result.device = GetParam();
    result.sub_group_size = kSubGroup;
    result.pipeline_read = true;
    result.pipeline_write = true;
    result.buffer_count = 3;
    result.pin_memory = false;
    result.keep_capacity = keep_capacity;
    result.nvme.nvme_path = root_;
    result.nvme.job_name = job;
    return result;
  }

  Outcome read(TestOffload& offload, const std::vector<std::uint16_t>& copy) const {
    const auto n = master_.size();
    Outcome out{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n), copy};
    offload.read_states(out.params, out.exp_avg, out.exp_avg_sq);
    return out;
  }

  // The plain step after backward with `real` (none: nothing happens, the step is skipped).
  Outcome plain(const StepHyperparameters* real) {
    TestOffload offload(*device_, optimizer_, master_, options(0, "plain"));
    std::vector<std::uint16_t> copy = initial_copy_;
    if (real != nullptr) offload.step(*real, grads_, ParamCopy::bf16, copy);
    return read(offload, copy);
  }

  // One overlapped step that guessed `guess` and is told `real`: it must leave what the plain
  // step with `real` leaves.
  OverlapOutcome expect_same_as_plain(const StepHyperparameters& guess,
                                      const StepHyperparameters* real, const std::string& job) {
    TestOffload offload(*device_, optimizer_, master_, options(3, job));
    OverlappedStep step(landings_, layout_, offload, 3);
    std::vector<std::uint16_t> copy = initial_copy_;
    Driver driver(landings_, layout_, grads_);
    const OverlapOutcome outcome = driver.run(offload, step, guess, real, copy);
    EXPECT_TRUE(read(offload, copy) == plain(real));
    return outcome;
  }

  // A backward that fails after the last module: the thread may step what that module made
  // final, then the queue carries the failure ("backward of module 4 failed").
  void fail_backward(OverlappedStep& step, const StepHyperparameters& guess, const StepIo& io) {
    step.begin(guess, io);
    const int last = layout_.module_count() - 1;
    step.module_final(last, landings_.last());
    const CpuQueue::Ticket failed =
        landings_.submit([] { throw std::runtime_error("backward of module 4 failed"); });
    for (int m = last - 1; m >= 0; --m)
      step.module_final(m, failed);
    EXPECT_THROW(landings_.drain(), std::runtime_error);
  }

  FlatLayout layout_ = six_modules();
  OptimizerConfig config_ = [] {
    OptimizerConfig c;
    c.type = OptimizerType::adamw;
    c.weight_decay = 0.01;
    return c;
  }();
  Optimizer optimizer_{config_};
  fs::path root_;
  std::unique_ptr<gpu::Device> device_;
  std::vector<float> master_, grads_;
  std::vector<std::uint16_t> initial_copy_;
};

TEST_P(OverlappedStepTest, KeptSubGroupsAreUndoneToTheBit) {
  TestOffload offload(*device_, optimizer_, master_, options(3, "undo"));
  std::vector<std::uint16_t> copy = initial_copy_;
  const Outcome before = read(offload, copy);
  const int n = static_cast<int>(offload.sub_groups().size());
  ASSERT_EQ(n, 7);
  const std::vector<int> order = {n - 1, n - 2, n - 3};
  PartitionGrads grads(grads_);
  PartitionMemory sink(std::as_writable_bytes(std::span(copy)), 2);
  const StepIo io{&grads, ParamCopy::bf16, &sink};
  EXPECT_EQ(offload.step_sub_groups(hyper(0.5f), io, order, {}, true), 3);
  EXPECT_EQ(offload.kept().size(), 3u);
  EXPECT_FALSE(read(offload, copy) == before);
  offload.undo_kept(nullptr, io);
  EXPECT_TRUE(offload.kept().empty());
  EXPECT_TRUE(read(offload, copy) == before);
}

TEST_P(OverlappedStepTest, ReadyFalseStopsAndLeavesTheRestAsTheyWere) {
  TestOffload offload(*device_, optimizer_, master_, options(3, "stop"));
  std::vector<std::uint16_t> copy = initial_copy_;
  const Outcome before = read(offload, copy);
  const int n = static_cast<int>(offload.sub_groups().size());
  PartitionGrads grads(grads_);
  PartitionMemory sink(std::as_writable_bytes(std::span(copy)), 2);
  const StepIo io{&grads, ParamCopy::bf16, &sink};
  // The NVMe reads of n-2 and n-3 are in flight when the stop comes: they are put back clean.
  const int stepped = offload.step_sub_groups(
      hyper(0.5f), io, std::vector<int>{n - 1, n - 2, n - 3}, [&](int g) { return g == n - 1; },
      true);
  EXPECT_EQ(stepped, 1);
  ASSERT_EQ(offload.kept().size(), 1u);
  // Everything before the last sub-group is as it was.
  const Outcome after = read(offload, copy);
  const auto stepped_from = static_cast<std::size_t>(offload.sub_groups().back().begin);
  EXPECT_EQ(std::memcmp(after.params.data(), before.params.data(), stepped_from * sizeof(float)),
            0);
  EXPECT_EQ(std::memcmp(after.exp_avg.data(), before.exp_avg.data(), stepped_from * sizeof(float)),
            0);
  offload.undo_kept(nullptr, io);
  EXPECT_TRUE(read(offload, copy) == before);
  // The offload is still consistent: a whole step runs and equals the plain one.
  const StepHyperparameters real = hyper(0.5f);
  offload.step(real, grads_, ParamCopy::bf16, copy);
  EXPECT_TRUE(read(offload, copy) == plain(&real));
}

TEST_P(OverlappedStepTest, GuessThatHoldsKeepsTheEarlySteps) {
  const StepHyperparameters guess = hyper(0.5f);
  const OverlapOutcome outcome = expect_same_as_plain(guess, &guess, "holds");
  EXPECT_EQ(outcome.early_sub_groups, 3);
  EXPECT_FALSE(outcome.undone);
}

// The sub-groups the thread did not reach during backward are the first ones, final last and
// needed first by the next forward: finish() names them, LateSubGroups has the sink expect their
// ranges, then steps them first to last on a thread of its own; settle() waits for them, and
// the step is still the plain one, bit for bit.
TEST_P(OverlappedStepTest, TheSubGroupsLeftAfterBackwardAreSteppedFirstToLastBesideTheCaller) {
  TestOffload offload(*device_, optimizer_, master_, options(3, "late"));
  OverlappedStep step(landings_, layout_, offload, 3);
  std::vector<std::uint16_t> copy = initial_copy_;
  RecordingSink sink(copy);
  Driver driver(landings_, layout_, grads_);
  const StepHyperparameters guess = hyper(0.5f);
  const OverlapOutcome outcome = driver.run(offload, step, guess, &guess, copy, &sink);
  EXPECT_EQ(outcome.early_sub_groups, 3);
  EXPECT_EQ(outcome.unreached, (std::vector<int>{0, 1, 2, 3}));
  std::vector<std::string> expected;
  const std::vector<Range>& groups = offload.sub_groups();
  for (int g : {6, 5, 4})  // the kept ones, committed by finish()
    expected.push_back(fmt::format("commit {}", groups[static_cast<std::size_t>(g)].begin));
  for (int g = 0; g < 4; ++g)
    expected.push_back(fmt::format("expect {}", groups[static_cast<std::size_t>(g)].begin));
  for (int g = 0; g < 4; ++g)
    expected.push_back(fmt::format("commit {}", groups[static_cast<std::size_t>(g)].begin));
  EXPECT_EQ(sink.events(), expected);
  EXPECT_TRUE(read(offload, copy) == plain(&guess));
}

TEST_P(OverlappedStepTest, WrongGuessIsUndoneAndRedone) {
  const StepHyperparameters clipped = hyper(0.25f);
  const OverlapOutcome outcome = expect_same_as_plain(hyper(0.5f), &clipped, "clipped");
  EXPECT_EQ(outcome.early_sub_groups, 3);
  EXPECT_TRUE(outcome.undone);
}

TEST_P(OverlappedStepTest, SkippedStepLeavesEverythingAsItWas) {
  EXPECT_TRUE(expect_same_as_plain(hyper(0.5f), nullptr, "skipped").undone);
}

// A step that fails between begin() and finish() (backward threw): abandon() stops the thread
// where it is and puts back what it stepped; the next step is a normal one.
TEST_P(OverlappedStepTest, AbandonPutsBackWhatTheThreadStepped) {
  TestOffload offload(*device_, optimizer_, master_, options(3, "abandon"));
  OverlappedStep step(landings_, layout_, offload, 3);
  std::vector<std::uint16_t> copy = initial_copy_;
  const Outcome before = read(offload, copy);
  PartitionGrads grads(grads_);
  PartitionMemory sink(std::as_writable_bytes(std::span(copy)), 2);
  step.begin(hyper(0.5f), StepIo{&grads, ParamCopy::bf16, &sink});
  // Only the last module's gradients are final: the thread can step the last sub-group alone.
  step.module_final(layout_.module_count() - 1, landings_.last());
  landings_.drain();
  step.abandon();
  EXPECT_FALSE(step.running());
  EXPECT_TRUE(read(offload, copy) == before);
  Driver driver(landings_, layout_, grads_);
  const StepHyperparameters guess = hyper(0.5f);
  driver.run(offload, step, guess, &guess, copy);
  EXPECT_TRUE(read(offload, copy) == plain(&guess));
}

// A swap-file error on the thread (an early sub-group's read) comes out of finish() as the
// offload's UserError, and the state is marked inconsistent: nothing is silently half-stepped.
TEST_P(OverlappedStepTest, AnIoErrorOnTheThreadComesOutOfFinish) {
  if (GetParam() != OffloadDevice::nvme) GTEST_SKIP() << "the CPU tier does no I/O";
  OptimizerOffloadOptions o = options(3, "eio");
  o.nvme.faults.fail(8, EIO);  // completions 0..6 write the initial states; 7.. are the step's
  TestOffload offload(*device_, optimizer_, master_, o);
  OverlappedStep step(landings_, layout_, offload, 3);
  std::vector<std::uint16_t> copy = initial_copy_;
  Driver driver(landings_, layout_, grads_);
  const StepHyperparameters guess = hyper(0.5f);
  try {
    driver.run(offload, step, guess, &guess, copy);
    FAIL() << "expected the step to fail";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find(strerror(EIO)), std::string::npos) << error.what();
    EXPECT_NE(error.fix().find("SMART log"), std::string::npos) << error.fix();
    EXPECT_NE(error.fix().find("training cannot continue from this state"), std::string::npos);
  }
  EXPECT_FALSE(step.running());
  EXPECT_TRUE(offload.inconsistent());
}

// A swap-file error while the sub-groups left after backward are stepped comes out of
// LateSubGroups::settle() as the offload's UserError, the state is marked inconsistent, and the
// sink is told, so that a forward waiting for those ranges fails with the same error instead of
// waiting for ever.
TEST_P(OverlappedStepTest, AnIoErrorAfterFinishComesOutOfSettleAndReachesTheSink) {
  if (GetParam() != OffloadDevice::nvme) GTEST_SKIP() << "the CPU tier does no I/O";
  OptimizerOffloadOptions o = options(3, "late-eio");
  // Completions 0..6 write the initial states, 7..12 are the three early sub-groups' reads and
  // writes, 13.. those of the four left after backward.
  o.nvme.faults.fail(15, EIO);
  TestOffload offload(*device_, optimizer_, master_, o);
  OverlappedStep step(landings_, layout_, offload, 3);
  std::vector<std::uint16_t> copy = initial_copy_;
  RecordingSink sink(copy);
  Driver driver(landings_, layout_, grads_);
  const StepHyperparameters guess = hyper(0.5f);
  try {
    driver.run(offload, step, guess, &guess, copy, &sink);
    FAIL() << "expected the step to fail";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find(strerror(EIO)), std::string::npos) << error.what();
  }
  EXPECT_TRUE(offload.inconsistent());
  const std::vector<std::string> events = sink.events();
  ASSERT_FALSE(events.empty());
  EXPECT_NE(events.back().find("forgo: "), std::string::npos) << events.back();
  EXPECT_NE(events.back().find(strerror(EIO)), std::string::npos) << events.back();
  EXPECT_NE(events.back().find("training cannot continue from this state"), std::string::npos);
}

// Backward fails (a landing job throws) after the thread has stepped what was final: the thread
// stops at the failed point, finish() rethrows the landing's error, and the optimizer is whole and
// as it was (the failure was backward's, not the optimizer's).
TEST_P(OverlappedStepTest, AFailedBackwardLeavesTheOptimizerAsItWas) {
  TestOffload offload(*device_, optimizer_, master_, options(3, "failed"));
  OverlappedStep step(landings_, layout_, offload, 3);
  std::vector<std::uint16_t> copy = initial_copy_;
  const Outcome before = read(offload, copy);
  const StepHyperparameters guess = hyper(0.5f);
  PartitionGrads grads(grads_);
  PartitionMemory sink(std::as_writable_bytes(std::span(copy)), 2);
  fail_backward(step, guess, StepIo{&grads, ParamCopy::bf16, &sink});
  try {
    step.finish(&guess);
    FAIL() << "expected finish() to rethrow the stream's error";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "backward of module 4 failed");
  }
  EXPECT_FALSE(step.running());
  EXPECT_FALSE(offload.inconsistent());
  EXPECT_TRUE(read(offload, copy) == before);
}

// A step the gradients cannot change (Guess::fixed): no rollback window, every sub-group is
// stepped once, by the thread as it becomes final until finish() stops it, the rest by the
// thread finish() leaves, their new parameters going to the sink from those threads.
TEST_P(OverlappedStepTest, AFixedGuessStepsEverySubGroupOnceOffTheCallersThread) {
  TestOffload offload(*device_, optimizer_, master_, options(0, "fixed"));
  OverlappedStep step(landings_, layout_, offload, 0, OverlappedStep::Guess::fixed);
  std::vector<std::uint16_t> copy = initial_copy_;
  Driver driver(landings_, layout_, grads_);
  const StepHyperparameters guess = hyper(0.5f);
  const OverlapOutcome outcome = driver.run(offload, step, guess, &guess, copy);
  EXPECT_EQ(outcome.early_sub_groups + static_cast<int>(outcome.unreached.size()), 7);
  EXPECT_FALSE(outcome.undone);
  EXPECT_EQ(offload.rollback_bytes(), 0);
  EXPECT_TRUE(read(offload, copy) == plain(&guess));
}

// With a step the gradients cannot change, finish() stops the thread after the sub-group it is
// stepping instead of letting it step the rest last first: here it has stepped the last
// sub-group and waits for the next to be final when backward ends, and the other six are named
// first to last; stepped so, they make the plain step.
TEST_P(OverlappedStepTest, AFixedGuessStopsWhenBackwardEndsAndLeavesTheRestFirstToLast) {
  TestOffload offload(*device_, optimizer_, master_, options(0, "fixed-stop"));
  OverlappedStep step(landings_, layout_, offload, 0, OverlappedStep::Guess::fixed);
  std::vector<std::uint16_t> copy = initial_copy_;
  std::vector<float> partition(grads_.size(), 0.0f);
  PartitionGrads partition_grads(partition);
  RecordingSink sink(copy);
  const StepIo io{&partition_grads, ParamCopy::bf16, &sink};
  const StepHyperparameters guess = hyper(0.5f);
  step.begin(guess, io);
  // Every module's gradients land; only the last module's are said final before finish().
  const int last = layout_.module_count() - 1;
  for (int m = last; m >= 0; --m) {
    const ModuleSlice slice = layout_.module(m);
    const CpuQueue::Ticket landed = landings_.submit([&, slice] {
      std::memcpy(partition.data() + slice.partition_offset, grads_.data() + slice.partition_offset,
                  static_cast<std::size_t>(slice.shard_numel) * sizeof(float));
    });
    if (m == last) step.module_final(m, landed);
  }
  landings_.drain();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sink.events().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  const OverlapOutcome outcome = step.finish(&guess);
  EXPECT_EQ(outcome.early_sub_groups, 1);
  EXPECT_EQ(outcome.unreached, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  LateSubGroups late(offload);
  late.start(guess, io, outcome.unreached);
  late.settle();
  EXPECT_TRUE(read(offload, copy) == plain(&guess));
}

// With nothing kept, a backward that fails after the thread stepped the final sub-groups leaves
// the optimizer half a step on: it is marked inconsistent, and the next step refuses, saying so.
TEST_P(OverlappedStepTest, AFailedBackwardAfterFixedEarlyStepsMarksTheStatesInconsistent) {
  TestOffload offload(*device_, optimizer_, master_, options(0, "fixed-failed"));
  OverlappedStep step(landings_, layout_, offload, 0, OverlappedStep::Guess::fixed);
  std::vector<std::uint16_t> copy = initial_copy_;
  const StepHyperparameters guess = hyper(0.5f);
  PartitionGrads grads(grads_);
  RecordingSink sink(copy);
  fail_backward(step, guess, StepIo{&grads, ParamCopy::bf16, &sink});
  // The last sub-group's gradients landed before the failure: finish() comes once the thread
  // has stepped it (finish() would stop the thread before it otherwise).
  const std::string last_stepped = fmt::format("commit {}", offload.sub_groups().back().begin);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sink.events().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(sink.events(), std::vector<std::string>{last_stepped});
  EXPECT_THROW(step.finish(&guess), std::runtime_error);
  EXPECT_TRUE(offload.inconsistent());
  try {
    offload.step(guess, grads_, ParamCopy::bf16, copy);
    FAIL() << "expected the next step to refuse";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what())
                  .find("backward failed during the step after 1 of the "
                        "optimizer's 7 sub-groups were stepped"),
              std::string::npos)
        << error.what();
  }
}

// A fixed guess whose thread has stepped nothing when the step fails loses nothing.
TEST_P(OverlappedStepTest, AbandoningAFixedGuessBeforeAnyStepKeepsTheStatesWhole) {
  TestOffload offload(*device_, optimizer_, master_, options(0, "fixed-abandon"));
  OverlappedStep step(landings_, layout_, offload, 0, OverlappedStep::Guess::fixed);
  std::vector<std::uint16_t> copy = initial_copy_;
  const Outcome before = read(offload, copy);
  PartitionGrads grads(grads_);
  PartitionMemory sink(std::as_writable_bytes(std::span(copy)), 2);
  step.begin(hyper(0.5f), StepIo{&grads, ParamCopy::bf16, &sink});
  step.abandon();
  EXPECT_FALSE(offload.inconsistent());
  EXPECT_TRUE(read(offload, copy) == before);
}

INSTANTIATE_TEST_SUITE_P(Tiers, OverlappedStepTest,
                         ::testing::Values(OffloadDevice::cpu, OffloadDevice::nvme),
                         [](const ::testing::TestParamInfo<OffloadDevice>& tier) {
                           return std::string(to_string(tier.param));
                         });

}  // namespace
}  // namespace strata::engine::zero
