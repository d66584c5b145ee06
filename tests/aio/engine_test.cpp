// Round trips through aio::Engine on a real disk file, on both backends.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <vector>

#include "aio_test_support.h"

namespace strata::aio {
namespace {

using testing::TempDir;

class EngineTest : public ::testing::TestWithParam<Backend> {};

INSTANTIATE_TEST_SUITE_P(Backends, EngineTest,
                         ::testing::Values(Backend::io_uring, Backend::thread_pool),
                         [](const auto& backend) { return std::string(to_string(backend.param)); });

TEST_P(EngineTest, RoundTripsRandomOffsetsAndLengthsAcrossBlockBoundaries) {
  TempDir dir;
  std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 random(seed);
  Engine engine(testing::small_options(GetParam()));
  EXPECT_EQ(engine.backend(), GetParam());
  File file = engine.open(dir / "data", OpenMode::create);
  constexpr std::int64_t file_bytes = 4 << 20;
  testing::write_pattern(engine, file, file_bytes, 1);
  AlignedBuffer buffer(1 << 20);
  for (int round = 0; round < 40; ++round) {
    // Lengths of 1..256 sectors at any sector: most transfers straddle a 64 KiB block boundary.
    std::int64_t length = (std::int64_t(random() % 256) + 1) * 4096;
    std::int64_t offset = std::int64_t(random() % ((file_bytes - length) / 4096 + 1)) * 4096;
    auto span = buffer.span().first(static_cast<std::size_t>(length));
    if (round % 2 == 0) {
      testing::fill_pattern(span, offset, 1);  // rewrite the same content elsewhere in a piece
      engine.wait(engine.submit_write(file, offset, span));
    }
    std::fill(span.begin(), span.end(), std::byte{0});
    engine.wait(engine.submit_read(file, offset, span));
    ASSERT_EQ(testing::first_mismatch(span, offset, 1), -1) << "offset " << offset;
  }
}

TEST_P(EngineTest, ManyTicketsInFlightOnSeveralRings) {
  TempDir dir;
  EngineOptions options = testing::small_options(GetParam());
  options.thread_count = 4;
  options.block_size_bytes = 16 << 10;
  Engine engine(options);
  File file = engine.open(dir / "data", OpenMode::create);
  constexpr int tickets = 200;
  constexpr std::int64_t extent_bytes = 40 << 10;  // 2.5 pieces each
  AlignedBuffer source(tickets * extent_bytes);
  testing::fill_pattern(source.span(), 0, 7);
  std::vector<Ticket> writes;
  for (int i = 0; i < tickets; ++i) {
    writes.push_back(engine.submit_write(file, i * extent_bytes,
                                         source.span().subspan(i * extent_bytes, extent_bytes)));
  }
  for (Ticket ticket : writes)
    engine.wait(ticket);
  AlignedBuffer target(tickets * extent_bytes);
  for (int i = tickets - 1; i >= 0; --i) {  // reversed: completion order is not submission order
    (void)engine.submit_read(file, i * extent_bytes,
                             target.span().subspan(i * extent_bytes, extent_bytes));
  }
  engine.wait_all();
  EXPECT_EQ(testing::first_mismatch(target.span(), 0, 7), -1);
  EXPECT_GE(engine.stats().requests, 2 * tickets * 3);
}

TEST_P(EngineTest, ReadPastTheEndOfTheFileIsAnError) {
  TempDir dir;
  Engine engine(testing::small_options(GetParam()));
  File file = engine.open(dir / "data", OpenMode::create);
  testing::write_pattern(engine, file, 64 << 10, 3);
  AlignedBuffer buffer(128 << 10);
  try {
    engine.wait(engine.submit_read(file, 32 << 10, buffer.span()));
    FAIL() << "a read past the end of the file returned";
  } catch (const IoError& error) {
    EXPECT_EQ(error.errno_value(), 0);
    EXPECT_EQ(error.op(), Op::read);
    EXPECT_NE(std::string(error.what()).find("past the end"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(file.path()), std::string::npos);
  }
  // The engine is still usable, and a read of what exists works.
  engine.wait(engine.submit_read(file, 0, buffer.span().first(64 << 10)));
  EXPECT_EQ(testing::first_mismatch(buffer.span().first(64 << 10), 0, 3), -1);
}

TEST_P(EngineTest, ZeroLengthTransferCompletes) {
  TempDir dir;
  Engine engine(testing::small_options(GetParam()));
  File file = engine.open(dir / "data", OpenMode::create);
  engine.wait(engine.submit_write(file, 0, {}));
  engine.wait(engine.submit_read(file, 0, {}));
  EXPECT_EQ(file.size_bytes(), 0);
}

TEST_P(EngineTest, WritingAReadOnlyFileNamesEbadf) {
  TempDir dir;
  Engine engine(testing::small_options(GetParam()));
  {
    File file = engine.open(dir / "data", OpenMode::create);
    testing::write_pattern(engine, file, 64 << 10, 3);
  }
  File file = engine.open(dir / "data", OpenMode::read);
  AlignedBuffer buffer(64 << 10);
  try {
    engine.wait(engine.submit_write(file, 0, buffer.span()));
    FAIL() << "a write to a read-only file succeeded";
  } catch (const IoError& error) {
    EXPECT_EQ(error.errno_value(), EBADF);
    EXPECT_NE(std::string(error.what()).find("EBADF"), std::string::npos) << error.what();
  }
}

TEST_P(EngineTest, SequentialModesSingleSubmitAndNoOverlap) {
  TempDir dir;
  for (bool single_submit : {false, true}) {
    for (bool overlap : {false, true}) {
      EngineOptions options = testing::small_options(GetParam());
      options.single_submit = single_submit;
      options.overlap_events = overlap;
      options.record_latency = true;
      Engine engine(options);
      File file = engine.open(dir / "data", OpenMode::create);
      testing::write_pattern(engine, file, 2 << 20, 11);
      AlignedBuffer buffer(2 << 20);
      engine.wait(engine.submit_read(file, 0, buffer.span()));
      EXPECT_EQ(testing::first_mismatch(buffer.span(), 0, 11), -1);
      EXPECT_EQ(engine.latency().count(), engine.stats().requests);
      EXPECT_GT(engine.latency().percentile_ns(0.5), 0);
    }
  }
}

TEST(EngineRegisteredBuffers, PiecesInsideTheRegionUseFixedBuffers) {
  TempDir dir;
  AlignedBuffer region(4 << 20);
  Engine engine(testing::small_options(), {}, region.span());
  File file = engine.open(dir / "data", OpenMode::create);
  auto half = region.span().first(2 << 20);
  testing::fill_pattern(half, 0, 5);
  engine.wait(engine.submit_write(file, 0, half));
  auto other = region.span().subspan(2 << 20);
  engine.wait(engine.submit_read(file, 0, other));
  EXPECT_EQ(testing::first_mismatch(other, 0, 5), -1);
  if (engine.stats().fixed_requests == 0) {
    GTEST_SKIP() << "the kernel refused to register the buffers (RLIMIT_MEMLOCK?)";
  }
  EXPECT_EQ(engine.stats().fixed_requests, engine.stats().requests);
  // A buffer outside the region still works, unregistered.
  AlignedBuffer outside(1 << 20);
  std::int64_t fixed_before = engine.stats().fixed_requests;
  engine.wait(engine.submit_read(file, 0, outside.span()));
  EXPECT_EQ(engine.stats().fixed_requests, fixed_before);
  EXPECT_EQ(testing::first_mismatch(outside.span(), 0, 5), -1);
}

TEST(EngineTickets, MoreThanTicketsMaxOutstandingIsRefused) {
  TempDir dir;
  EngineOptions options = testing::small_options();
  options.tickets_max = 4;
  Engine engine(options);
  File file = engine.open(dir / "data", OpenMode::create);
  AlignedBuffer buffer(4096);
  for (int i = 0; i < 4; ++i)
    (void)engine.submit_write(file, i * 4096, buffer.span());
  EXPECT_THROW((void)engine.submit_write(file, 0, buffer.span()), std::length_error);
  engine.wait_all();
  engine.wait(engine.submit_read(file, 0, buffer.span()));  // slots are free again
}

TEST(EngineLatency, HistogramPercentiles) {
  LatencyHistogram histogram;
  for (int i = 1; i <= 1000; ++i)
    histogram.record(i * 1000);  // 1..1000 us
  EXPECT_EQ(histogram.count(), 1000);
  std::int64_t p50 = histogram.percentile_ns(0.5);
  std::int64_t p99 = histogram.percentile_ns(0.99);
  EXPECT_NEAR(static_cast<double>(p50), 500e3, 500e3 * 0.07);
  EXPECT_NEAR(static_cast<double>(p99), 990e3, 990e3 * 0.07);
  EXPECT_EQ(LatencyHistogram::bucket_of(7), 7);
  for (std::int64_t v : {31, 32, 33, 1000, 123456, 99999999}) {
    EXPECT_GE(LatencyHistogram::upper_bound_ns(LatencyHistogram::bucket_of(v)), v);
  }
}

}  // namespace
}  // namespace strata::aio
