#include "engine/memory/nvme_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <fmt/format.h>
#include <string>
#include <vector>

#include "aio/aligned_buffer.h"
#include "aio/errors.h"
#include "base/error.h"

namespace strata::engine::memory {
namespace {

namespace fs = std::filesystem;

class NvmeStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("strata-nvme-store-test-{}-{}", getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code error;
    fs::permissions(root_, fs::perms::owner_all, error);
    fs::remove_all(root_, error);
  }
  NvmeStoreOptions options(const fs::path& path) const {
    NvmeStoreOptions result;
    result.nvme_path = path;
    result.job_name = "test";
    result.rank = 1;
    return result;
  }
  fs::path root_;
};

std::string message_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const UserError& error) {
    return std::string(error.what()) + " | fix: " + error.fix();
  }
  return "no error";
}

mode_t mode_of(const fs::path& path) {
  struct stat info {};
  EXPECT_EQ(lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 0777;
}

TEST_F(NvmeStoreTest, RoundTripWithModesAndRemovalAtExit) {
  const std::vector<std::int64_t> sizes = {5000, 8192, 1 << 20};
  fs::path directory;
  {
    NvmeStore store(options(root_), sizes);
    directory = store.directory();
    EXPECT_EQ(directory, root_ / "strata-test" / "rank1");
    EXPECT_EQ(store.extent_bytes(0), 8192);
    EXPECT_EQ(store.extent_offset(2), 8192 + 8192);
    EXPECT_EQ(store.planned_bytes(), 16384 + (1 << 20));
    EXPECT_EQ(mode_of(directory), 0700u);
    EXPECT_EQ(mode_of(root_ / "strata-test"), 0700u);
    EXPECT_EQ(mode_of(store.swap_file()) & 0077, 0u);
    EXPECT_GE(fs::file_size(store.swap_file()), static_cast<std::uintmax_t>(store.planned_bytes()));

    std::vector<aio::AlignedBuffer> written;
    for (int p = 0; p < 3; ++p) {
      written.emplace_back(store.extent_bytes(p));
      auto bytes = written.back().span();
      for (std::size_t i = 0; i < bytes.size(); ++i)
        bytes[i] =
            std::byte{static_cast<unsigned char>((i * 7 + static_cast<std::size_t>(p)) & 255)};
      store.wait(store.submit_write(p, bytes));
    }
    for (int p = 2; p >= 0; --p) {
      aio::AlignedBuffer back(store.extent_bytes(p));
      store.wait(store.submit_read(p, back.span()));
      EXPECT_EQ(std::memcmp(back.data(), written[static_cast<std::size_t>(p)].data(),
                            static_cast<std::size_t>(back.size_bytes())),
                0);
    }
  }
  EXPECT_FALSE(fs::exists(directory));
  EXPECT_FALSE(fs::exists(root_ / "strata-test"));
}

// As DeepSpeed's swappers os.makedirs their folders: a missing nvme_path is made at open (private,
// 0700), and left when the store goes (the swap folders inside it are removed).
TEST_F(NvmeStoreTest, MakesAMissingPathAtOpen) {
  const fs::path path = root_ / "made" / "by" / "strata";
  {
    NvmeStore store(options(path));
    EXPECT_FALSE(fs::exists(root_ / "made"));  // the constructor makes nothing
    store.reserve(std::vector<std::int64_t>{4096});
    store.open();
    EXPECT_TRUE(fs::is_directory(path));
    EXPECT_EQ(mode_of(root_ / "made"), 0700u);
    EXPECT_EQ(mode_of(path), 0700u);
  }
  EXPECT_TRUE(fs::is_directory(path));
  EXPECT_FALSE(fs::exists(path / "strata-test"));
}

// check_nvme_path is what `strata config check` runs: it says the same as a store would, and makes
// nothing.
TEST_F(NvmeStoreTest, CheckAcceptsAPathThatCanBeMadeAndMakesNothing) {
  check_nvme_path(root_ / "a" / "b");
  EXPECT_FALSE(fs::exists(root_ / "a"));
  check_nvme_path(root_);
}

TEST_F(NvmeStoreTest, RefusesAPathUnderAFile) {
  std::ofstream(root_ / "file") << "x";
  for (const fs::path& path : {root_ / "file" / "swap", root_ / "file" / "a" / "b"}) {
    const std::string check = message_of([&] { check_nvme_path(path); });
    EXPECT_NE(check.find((root_ / "file").string() + " is not a directory"), std::string::npos)
        << check;
    const std::string store = message_of([&] { NvmeStore made(options(path), {}); });
    EXPECT_EQ(store, check);
  }
}

TEST_F(NvmeStoreTest, RefusesAMissingPathInAFolderItCannotWrite) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes through any mode bits";
  fs::create_directory(root_ / "ro");
  fs::permissions(root_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  const std::string message = message_of([&] { check_nvme_path(root_ / "ro" / "swap"); });
  EXPECT_NE(message.find("does not exist and cannot be made: " + (root_ / "ro").string() +
                         " is not writable"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("mkdir -p"), std::string::npos) << message;
}

TEST_F(NvmeStoreTest, RefusesAFile) {
  std::ofstream(root_ / "file") << "x";
  const std::string message = message_of([&] { NvmeStore store(options(root_ / "file"), {}); });
  EXPECT_NE(message.find("not a directory"), std::string::npos) << message;
}

TEST_F(NvmeStoreTest, RefusesAPathThroughASymlink) {
  fs::create_directories(root_ / "real" / "inner");
  fs::create_directory_symlink(root_ / "real", root_ / "link");
  for (const fs::path& path : {root_ / "link", root_ / "link" / "inner"}) {
    const std::string message = message_of([&] { NvmeStore store(options(path), {}); });
    EXPECT_NE(message.find("symbolic link"), std::string::npos) << message;
    EXPECT_NE(message.find((root_ / "real").string()), std::string::npos) << message;
  }
}

TEST_F(NvmeStoreTest, RefusesAnUnwritablePath) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes through any mode bits";
  fs::create_directory(root_ / "ro");
  fs::permissions(root_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  const std::string message = message_of([&] { NvmeStore store(options(root_ / "ro"), {}); });
  EXPECT_NE(message.find("not writable"), std::string::npos) << message;
}

TEST_F(NvmeStoreTest, RefusesTooLittleFreeSpaceFromThePlan) {
  const std::vector<std::int64_t> sizes = {std::int64_t{1} << 52};  // 4 PiB
  const std::string message = message_of([&] { NvmeStore store(options(root_), sizes); });
  EXPECT_NE(message.find("free"), std::string::npos) << message;
  EXPECT_NE(message.find("need"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(root_ / "strata-test"));  // refused before anything was created
}

TEST_F(NvmeStoreTest, RemovesALeftoverDirectoryOfACrashedRun) {
  fs::create_directories(root_ / "strata-test" / "rank1");
  std::ofstream(root_ / "strata-test" / "rank1" / "swap.bin") << "stale";
  NvmeStore store(options(root_), std::vector<std::int64_t>{4096});
  EXPECT_FALSE(fs::exists(root_ / "strata-test" / "rank1" / "swap.bin.crc32c") &&
               fs::file_size(root_ / "strata-test" / "rank1" / "swap.bin") == 5);
  EXPECT_GE(fs::file_size(store.swap_file()), 4096u);
}

TEST_F(NvmeStoreTest, RefusesADirectoryHeldByALiveJob) {
  NvmeStore first(options(root_), std::vector<std::int64_t>{4096});
  const std::string message =
      message_of([&] { NvmeStore second(options(root_), std::vector<std::int64_t>{4096}); });
  EXPECT_NE(message.find("live job"), std::string::npos) << message;
  EXPECT_NE(message.find(fmt::format("pid {}", getpid())), std::string::npos) << message;
  EXPECT_TRUE(fs::exists(first.swap_file()));
  // Another rank of the same job is fine.
  NvmeStoreOptions rank2 = options(root_);
  rank2.rank = 2;
  NvmeStore other(rank2, std::vector<std::int64_t>{4096});
}

TEST_F(NvmeStoreTest, AFailureAfterLockingGivesTheDirectoryBack) {
  NvmeStoreOptions refused = options(root_);
  refused.aio.backend = aio::Backend::io_uring;
  refused.faults.refuse_io_uring(EPERM);
  EXPECT_THROW(NvmeStore store(refused, std::vector<std::int64_t>{4096}), UserError);
  EXPECT_FALSE(fs::exists(root_ / "strata-test"));
  NvmeStore again(options(root_), std::vector<std::int64_t>{4096});  // not held by anyone
  EXPECT_TRUE(fs::exists(again.swap_file()));
}

TEST_F(NvmeStoreTest, InjectedErrorsNameTheFileAndOffset) {
  for (int errno_value : {EIO, ENOSPC}) {
    NvmeStoreOptions faulty = options(root_);
    faulty.faults.fail(1, errno_value);
    NvmeStore store(faulty, std::vector<std::int64_t>{8192, 8192});
    aio::AlignedBuffer buffer(8192);
    store.wait(store.submit_write(0, buffer.span()));
    try {
      store.wait(store.submit_write(1, buffer.span()));
      FAIL() << "expected IoError";
    } catch (const aio::IoError& error) {
      const std::string what = error.what();
      EXPECT_EQ(error.errno_value(), errno_value);
      EXPECT_NE(what.find(store.swap_file().string()), std::string::npos) << what;
      EXPECT_NE(what.find(root_.string()), std::string::npos) << what;
      EXPECT_EQ(error.offset(), 8192);
    }
  }
}

TEST_F(NvmeStoreTest, AFlippedBitIsAChecksumError) {
  NvmeStoreOptions faulty = options(root_);
  faulty.faults.flip_bit(1);
  NvmeStore store(faulty, std::vector<std::int64_t>{16384});
  aio::AlignedBuffer buffer(16384);
  store.wait(store.submit_write(0, buffer.span()));
  EXPECT_THROW(store.wait(store.submit_read(0, buffer.span())), aio::ChecksumError);
}

TEST_F(NvmeStoreTest, AShortTransferIsResubmittedAndTheDataIsWhole) {
  NvmeStoreOptions faulty = options(root_);
  faulty.faults.shorten(0).shorten(1);
  NvmeStore store(faulty, std::vector<std::int64_t>{65536});
  aio::AlignedBuffer buffer(65536);
  for (std::size_t i = 0; i < 65536; ++i)
    buffer.span()[i] = std::byte{static_cast<unsigned char>(i % 251)};
  store.wait(store.submit_write(0, buffer.span()));
  aio::AlignedBuffer back(65536);
  store.wait(store.submit_read(0, back.span()));
  EXPECT_EQ(std::memcmp(back.data(), buffer.data(), 65536), 0);
}

}  // namespace
}  // namespace strata::engine::memory
