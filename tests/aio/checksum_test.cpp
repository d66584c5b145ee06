// CRC32C per 4 KiB sector: kept in memory, saved in the sidecar, verified on every read.
#include <fcntl.h>
#include <unistd.h>

#include "aio_test_support.h"

namespace strata::aio {
namespace {

using testing::TempDir;

TEST(Checksums, ReopenedFileVerifiesFromItsSidecar) {
  TempDir dir;
  Engine engine(testing::small_options());
  {
    File file = engine.open(dir / "swap", OpenMode::create);
    testing::write_pattern(engine, file, 1 << 20, 21);
    file.sync();
  }
  File file = engine.open(dir / "swap", OpenMode::read);
  AlignedBuffer buffer(1 << 20);
  engine.wait(engine.submit_read(file, 0, buffer.span()));
  EXPECT_EQ(testing::first_mismatch(buffer.span(), 0, 21), -1);
  // A sub-range that starts and ends inside pieces verifies too: checksums are per sector.
  engine.wait(engine.submit_read(file, 12 << 10, buffer.span().first(100 << 10)));
  EXPECT_EQ(testing::first_mismatch(buffer.span().first(100 << 10), 12 << 10, 21), -1);
}

TEST(Checksums, PartialOverwriteStaysVerified) {
  TempDir dir;
  Engine engine(testing::small_options());
  File file = engine.open(dir / "swap", OpenMode::create);
  testing::write_pattern(engine, file, 1 << 20, 1);
  AlignedBuffer patch(8 << 10);
  testing::fill_pattern(patch.span(), 60 << 10, 2);  // straddles the 64 KiB block boundary
  engine.wait(engine.submit_write(file, 60 << 10, patch.span()));
  AlignedBuffer buffer(1 << 20);
  engine.wait(engine.submit_read(file, 0, buffer.span()));
  EXPECT_EQ(testing::first_mismatch(buffer.span().first(60 << 10), 0, 1), -1);
  EXPECT_EQ(testing::first_mismatch(buffer.span().subspan(60 << 10, 8 << 10), 60 << 10, 2), -1);
}

TEST(Checksums, BitFlippedOnDiskIsDetectedByTheNextRead) {
  TempDir dir;
  Engine engine(testing::small_options());
  {
    File file = engine.open(dir / "swap", OpenMode::create);
    testing::write_pattern(engine, file, 1 << 20, 5);
  }
  // Flip one bit behind strata's back, as a failing disk would.
  constexpr std::int64_t flipped_at = 300001;
  int fd = ::open((dir / "swap").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  unsigned char byte = 0;
  ASSERT_EQ(::pread(fd, &byte, 1, flipped_at), 1);
  byte ^= 0x10;
  ASSERT_EQ(::pwrite(fd, &byte, 1, flipped_at), 1);
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);

  File file = engine.open(dir / "swap", OpenMode::read);
  AlignedBuffer buffer(1 << 20);
  try {
    engine.wait(engine.submit_read(file, 0, buffer.span()));
    FAIL() << "the flipped bit was not detected";
  } catch (const ChecksumError& error) {
    constexpr std::int64_t sector = flipped_at / 4096 * 4096;
    EXPECT_EQ(error.offset(), sector);
    EXPECT_TRUE(error.recorded());
    EXPECT_EQ(error.errno_value(), EBADMSG);
    std::string what = error.what();
    EXPECT_NE(what.find(file.path()), std::string::npos) << what;
    EXPECT_NE(what.find("offset " + std::to_string(sector)), std::string::npos) << what;
  }
  // Other sectors still read fine.
  engine.wait(engine.submit_read(file, 0, buffer.span().first(256 << 10)));
}

TEST(Checksums, MissingSidecarIsRefusedAtOpen) {
  TempDir dir;
  Engine engine(testing::small_options());
  {
    File file = engine.open(dir / "swap", OpenMode::create);
    testing::write_pattern(engine, file, 64 << 10, 5);
  }
  std::filesystem::remove(sidecar_path(dir / "swap"));
  try {
    (void)engine.open(dir / "swap", OpenMode::read);
    FAIL() << "opened without a sidecar";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("no checksum sidecar"), std::string::npos);
    EXPECT_NE(error.fix().find("verify"), std::string::npos);
  }
  EngineOptions options = testing::small_options();
  options.verify_checksums = false;
  Engine unverified(options);
  File file = unverified.open(dir / "swap", OpenMode::read);
  EXPECT_FALSE(file.verifies_checksums());
}

TEST(Checksums, StaleSidecarIsRefusedAtOpen) {
  TempDir dir;
  Engine engine(testing::small_options());
  {
    File file = engine.open(dir / "swap", OpenMode::create);
    testing::write_pattern(engine, file, 64 << 10, 5);
  }
  std::filesystem::resize_file(dir / "swap", 128 << 10);
  try {
    (void)engine.open(dir / "swap", OpenMode::read_write);
    FAIL() << "opened with a stale sidecar";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("stale"), std::string::npos) << error.what();
  }
}

TEST(Checksums, UnwrittenSectorHasNoChecksum) {
  TempDir dir;
  Engine engine(testing::small_options());
  File file = engine.open(dir / "swap", OpenMode::create);
  file.allocate(64 << 10);  // preallocated zeros, never written through strata
  AlignedBuffer buffer(64 << 10);
  try {
    engine.wait(engine.submit_read(file, 0, buffer.span()));
    FAIL() << "read unverified data";
  } catch (const ChecksumError& error) {
    EXPECT_FALSE(error.recorded());
    EXPECT_EQ(error.offset(), 0);
  }
}

}  // namespace
}  // namespace strata::aio
