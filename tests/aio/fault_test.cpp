// Every error path, through a seeded FaultPlan rewriting real completions (TigerBeetle's
// testing/storage.zig), on both backends.
#include <random>

#include "aio/fault_plan.h"
#include "aio_test_support.h"

namespace strata::aio {
namespace {

using testing::TempDir;

class FaultTest : public ::testing::TestWithParam<Backend> {
 protected:
  EngineOptions options() const {
    EngineOptions options = testing::small_options(GetParam());
    options.thread_count = 1;  // completion numbers follow submission order on one ring
    options.queue_depth = 1;
    return options;
  }
  TempDir dir_;
};

INSTANTIATE_TEST_SUITE_P(Backends, FaultTest,
                         ::testing::Values(Backend::io_uring, Backend::thread_pool),
                         [](const auto& backend) { return std::string(to_string(backend.param)); });

TEST_P(FaultTest, EioOnWriteNamesOpPathOffsetAndErrnoAndTheEngineStaysUsable) {
  FaultPlan faults;
  faults.fail(2, EIO);  // the third 64 KiB piece
  Engine engine(options(), faults);
  File file = engine.open(dir_ / "swap", OpenMode::create);
  AlignedBuffer buffer(256 << 10);
  testing::fill_pattern(buffer.span(), 0, 1);
  try {
    engine.wait(engine.submit_write(file, 0, buffer.span()));
    FAIL() << "the EIO was lost";
  } catch (const IoError& error) {
    EXPECT_EQ(error.op(), Op::write);
    EXPECT_EQ(error.errno_value(), EIO);
    EXPECT_EQ(error.offset(), 128 << 10);
    EXPECT_EQ(error.length_bytes(), 64 << 10);
    std::string what = error.what();
    EXPECT_NE(what.find("write of " + file.path()), std::string::npos) << what;
    EXPECT_NE(what.find("offset 131072"), std::string::npos) << what;
    EXPECT_NE(what.find("EIO"), std::string::npos) << what;
    EXPECT_NE(error.fix().find("dmesg"), std::string::npos);
  }
  engine.wait(engine.submit_write(file, 0, buffer.span()));
  AlignedBuffer check(256 << 10);
  engine.wait(engine.submit_read(file, 0, check.span()));
  EXPECT_EQ(testing::first_mismatch(check.span(), 0, 1), -1);
}

TEST_P(FaultTest, EioOnRead) {
  FaultPlan faults;
  faults.fail(1, EIO);
  Engine engine(options(), faults);
  File file = engine.open(dir_ / "swap", OpenMode::create);
  testing::write_pattern(engine, file, 64 << 10, 1);  // completion 0
  AlignedBuffer buffer(64 << 10);
  try {
    engine.wait(engine.submit_read(file, 0, buffer.span()));
    FAIL() << "the EIO was lost";
  } catch (const IoError& error) {
    EXPECT_EQ(error.op(), Op::read);
    EXPECT_EQ(error.errno_value(), EIO);
  }
}

TEST_P(FaultTest, EnospcSaysWhereToFreeSpace) {
  FaultPlan faults;
  faults.fail(0, ENOSPC);
  Engine engine(options(), faults);
  File file = engine.open(dir_ / "swap", OpenMode::create);
  AlignedBuffer buffer(64 << 10);
  try {
    engine.wait(engine.submit_write(file, 0, buffer.span()));
    FAIL() << "the ENOSPC was lost";
  } catch (const IoError& error) {
    EXPECT_EQ(error.errno_value(), ENOSPC);
    EXPECT_NE(std::string(error.what()).find("No space left on device"), std::string::npos);
    EXPECT_NE(error.fix().find("nvme_path"), std::string::npos) << error.fix();
  }
}

TEST_P(FaultTest, ShortTransfersAreResubmittedForTheRest) {
  FaultPlan faults;
  faults.shorten(0).shorten(1).shorten(5).shorten(6);
  Engine engine(options(), faults);
  File file = engine.open(dir_ / "swap", OpenMode::create);
  testing::write_pattern(engine, file, 256 << 10, 8);
  AlignedBuffer buffer(256 << 10);
  engine.wait(engine.submit_read(file, 0, buffer.span()));
  EXPECT_EQ(testing::first_mismatch(buffer.span(), 0, 8), -1);
  EXPECT_GE(engine.stats().resubmissions, 4);
}

TEST_P(FaultTest, EagainAndEintrAreResubmitted) {
  FaultPlan faults;
  faults.fail(0, EAGAIN).fail(1, EAGAIN).fail(3, EINTR);
  Engine engine(options(), faults);
  File file = engine.open(dir_ / "swap", OpenMode::create);
  testing::write_pattern(engine, file, 128 << 10, 8);
  AlignedBuffer buffer(128 << 10);
  engine.wait(engine.submit_read(file, 0, buffer.span()));
  EXPECT_EQ(testing::first_mismatch(buffer.span(), 0, 8), -1);
  EXPECT_EQ(engine.stats().resubmissions, 3);
}

TEST_P(FaultTest, BitFlippedAfterARealReadRaisesChecksumError) {
  FaultPlan faults(42);
  faults.flip_bit(1);
  Engine engine(options(), faults);
  File file = engine.open(dir_ / "swap", OpenMode::create);
  testing::write_pattern(engine, file, 64 << 10, 8);  // completion 0
  AlignedBuffer buffer(64 << 10);
  try {
    engine.wait(engine.submit_read(file, 0, buffer.span()));
    FAIL() << "the flipped bit was not detected";
  } catch (const ChecksumError& error) {
    EXPECT_TRUE(error.recorded());
    EXPECT_EQ(error.offset() % 4096, 0);
    EXPECT_NE(std::string(error.what()).find(file.path()), std::string::npos);
  }
  engine.wait(engine.submit_read(file, 0, buffer.span()));  // a clean read after it
  EXPECT_EQ(testing::first_mismatch(buffer.span(), 0, 8), -1);
}

TEST_P(FaultTest, FirstErrorOfManyInFlightIsReportedAndTheRestDrained) {
  FaultPlan faults;
  faults.fail(10, EIO).fail(30, ENOSPC).fail(31, EIO);
  EngineOptions many = options();
  many.thread_count = 3;
  many.queue_depth = 8;
  Engine engine(many, faults);
  File file = engine.open(dir_ / "swap", OpenMode::create);
  AlignedBuffer buffer(64 * (128 << 10));
  testing::fill_pattern(buffer.span(), 0, 3);
  for (int i = 0; i < 64; ++i) {
    (void)engine.submit_write(file, i * (128 << 10),
                              buffer.span().subspan(i * (128 << 10), 128 << 10));
  }
  try {
    engine.wait_all();
    FAIL() << "the errors were lost";
  } catch (const IoError& error) {
    EXPECT_TRUE(error.errno_value() == EIO || error.errno_value() == ENOSPC) << error.what();
  }
  // Everything drained, every slot free: the engine takes new work and it is right.
  engine.wait(engine.submit_write(file, 0, buffer.span()));
  AlignedBuffer check(buffer.size_bytes());
  engine.wait(engine.submit_read(file, 0, check.span()));
  EXPECT_EQ(testing::first_mismatch(check.span(), 0, 3), -1);
}

TEST_P(FaultTest, RandomFaultsNeverPassSilently) {
  std::uint64_t seed = std::random_device{}();
  std::printf("FaultTest seed=%llu\n", static_cast<unsigned long long>(seed));
  SCOPED_TRACE("seed=" + std::to_string(seed));
  FaultPlan faults(seed);
  faults.fail_randomly(0.05, EIO);
  EngineOptions random_options = options();
  random_options.queue_depth = 4;
  Engine engine(random_options, faults);
  File file = engine.open(dir_ / "swap", OpenMode::create);
  AlignedBuffer source(256 << 10);
  AlignedBuffer target(256 << 10);
  testing::fill_pattern(source.span(), 0, 6);
  int failed = 0;
  for (int round = 0; round < 100; ++round) {
    try {
      engine.wait(engine.submit_write(file, 0, source.span()));
      engine.wait(engine.submit_read(file, 0, target.span()));
      ASSERT_EQ(testing::first_mismatch(target.span(), 0, 6), -1);
    } catch (const IoError& error) {
      ASSERT_EQ(error.errno_value(), EIO) << error.what();
      ++failed;
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_LT(failed, 100);
}

TEST(FaultIoUring, RefusedSetUpFallsBackToThreadsOrFailsWhenForced) {
  TempDir dir;
  FaultPlan faults;
  faults.refuse_io_uring(ENOSYS);
  EngineOptions options = testing::small_options(Backend::automatic);
  {
    Engine engine(options, faults);
    EXPECT_EQ(engine.backend(), Backend::thread_pool);
    File file = engine.open(dir / "swap", OpenMode::create);
    testing::write_pattern(engine, file, 256 << 10, 1);
    AlignedBuffer buffer(256 << 10);
    engine.wait(engine.submit_read(file, 0, buffer.span()));
    EXPECT_EQ(testing::first_mismatch(buffer.span(), 0, 1), -1);
  }
  options.backend = Backend::io_uring;
  try {
    Engine engine(options, faults);
    FAIL() << "a forced io_uring backend started without io_uring";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("ENOSYS"), std::string::npos) << error.what();
    EXPECT_NE(error.fix().find("STRATA_AIO_BACKEND=threads"), std::string::npos);
  }
}

// The rings skip the per-completion fault lookup (and finish whole pieces after refilling the
// ring) only when the plan cannot rewrite a completion; any planned or random fault keeps every
// completion on the checked path.
TEST(FaultPlanRewrites, OnlyPlansThatRewriteCompletionsSaySo) {
  EXPECT_FALSE(FaultPlan{}.rewrites_completions());
  EXPECT_FALSE(FaultPlan(7).refuse_direct_open().rewrites_completions());
  EXPECT_FALSE(FaultPlan(7).refuse_io_uring(ENOSYS).rewrites_completions());
  EXPECT_TRUE(FaultPlan(7).fail(3, EIO).rewrites_completions());
  EXPECT_TRUE(FaultPlan(7).shorten(0).rewrites_completions());
  EXPECT_TRUE(FaultPlan(7).flip_bit(1).rewrites_completions());
  EXPECT_TRUE(FaultPlan(7).fail_randomly(0.01, EIO).rewrites_completions());
}

}  // namespace
}  // namespace strata::aio
