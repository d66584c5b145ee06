// Opening files: modes, symlinks, missing paths, O_DIRECT and its fallbacks, the environment
// overrides, alignment refusals and option validation.
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "aio/fault_plan.h"
#include "aio_test_support.h"

namespace strata::aio {
namespace {

using testing::TempDir;

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty())
      ::unsetenv(name_);
    else
      ::setenv(name_, old_.c_str(), 1);
  }

 private:
  const char* name_;
  std::string old_;
};

template <typename Error, typename Function>
Error expect_throw(Function function) {
  try {
    function();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "no exception";
  throw std::runtime_error("no exception");
}

TEST(FileOpen, CreatesMode0600AndPreallocates) {
  TempDir dir;
  ::umask(0);  // the mode must come from strata, not from a friendly umask
  Engine engine(testing::small_options());
  File file = engine.open(dir / "swap", OpenMode::create);
  struct stat info {};
  ASSERT_EQ(::stat((dir / "swap").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600);
  file.allocate(1 << 20);
  ASSERT_EQ(::stat((dir / "swap").c_str(), &info), 0);
  EXPECT_EQ(info.st_size, 1 << 20);
  EXPECT_GE(info.st_blocks * 512, 1 << 20);  // really allocated, not a sparse hole
  EXPECT_EQ(file.alignment_bytes() % 4096, 0);
  ::umask(022);
}

TEST(FileOpen, RefusesASymlink) {
  TempDir dir;
  { std::ofstream(dir / "real") << "x"; }
  std::filesystem::create_symlink(dir / "real", dir / "link");
  Engine engine(testing::small_options());
  auto error = expect_throw<IoError>([&] { (void)engine.open(dir / "link", OpenMode::read); });
  EXPECT_EQ(error.errno_value(), ELOOP);
  EXPECT_EQ(error.op(), Op::open);
  EXPECT_NE(std::string(error.what()).find((dir / "link").string()), std::string::npos);
  EXPECT_NE(error.fix().find("symbolic link"), std::string::npos) << error.fix();
}

TEST(FileOpen, MissingFileAndDirectoryNameEnoent) {
  TempDir dir;
  Engine engine(testing::small_options());
  auto error = expect_throw<IoError>([&] { (void)engine.open(dir / "nope", OpenMode::read); });
  EXPECT_EQ(error.errno_value(), ENOENT);
  error =
      expect_throw<IoError>([&] { (void)engine.open(dir / "no-dir" / "swap", OpenMode::create); });
  EXPECT_EQ(error.errno_value(), ENOENT);
  EXPECT_NE(std::string(error.what()).find("no-dir"), std::string::npos);
}

TEST(FileOpen, UnwritableDirectoryNamesEacces) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions do not refuse root";
  TempDir dir;
  std::filesystem::create_directory(dir / "locked");
  std::filesystem::permissions(
      dir / "locked", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  Engine engine(testing::small_options());
  auto error =
      expect_throw<IoError>([&] { (void)engine.open(dir / "locked" / "swap", OpenMode::create); });
  EXPECT_EQ(error.errno_value(), EACCES);
}

TEST(FileOpen, TmpfsWorksDirectOrBuffered) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm here";
  TempDir dir("/dev/shm");
  struct statfs info {};
  ASSERT_EQ(::statfs(dir.path().c_str(), &info), 0);
  Engine engine(testing::small_options());
  File file = engine.open(dir / "swap", OpenMode::create);
  // Linux 6.6+ tmpfs accepts O_DIRECT; older kernels refuse it and the file falls back to the
  // page cache. Either way the data round-trips.
  RecordProperty("tmpfs_direct", file.direct() ? "yes" : "no (buffered fallback)");
  testing::write_pattern(engine, file, 1 << 20, 9);
  AlignedBuffer buffer(1 << 20);
  engine.wait(engine.submit_read(file, 0, buffer.span()));
  EXPECT_EQ(testing::first_mismatch(buffer.span(), 0, 9), -1);
}

TEST(FileOpen, RefusedDirectFallsBackToBufferedWhenOptional) {
  TempDir dir;
  FaultPlan faults;
  faults.refuse_direct_open();
  Engine engine(testing::small_options(), faults);
  File file = engine.open(dir / "swap", OpenMode::create);
  EXPECT_FALSE(file.direct());
  testing::write_pattern(engine, file, 1 << 20, 4);
  AlignedBuffer buffer(1 << 20);
  engine.wait(engine.submit_read(file, 0, buffer.span()));
  EXPECT_EQ(testing::first_mismatch(buffer.span(), 0, 4), -1);
}

TEST(FileOpen, RefusedDirectIsAnErrorWhenRequired) {
  TempDir dir;
  FaultPlan faults;
  faults.refuse_direct_open();
  EngineOptions options = testing::small_options();
  options.direct = DirectMode::required;
  Engine engine(options, faults);
  auto error = expect_throw<IoError>([&] { (void)engine.open(dir / "swap", OpenMode::create); });
  EXPECT_EQ(error.errno_value(), EINVAL);
  EXPECT_NE(error.fix().find("O_DIRECT"), std::string::npos) << error.fix();
}

TEST(FileOpen, EnvironmentForcesBufferedAndThreads) {
  TempDir dir;
  ScopedEnv direct("STRATA_AIO_DIRECT", "off");
  ScopedEnv backend("STRATA_AIO_BACKEND", "threads");
  Engine engine(testing::small_options(Backend::io_uring));
  EXPECT_EQ(engine.backend(), Backend::thread_pool);
  EXPECT_EQ(engine.options().direct, DirectMode::off);
  File file = engine.open(dir / "swap", OpenMode::create);
  EXPECT_FALSE(file.direct());
  testing::write_pattern(engine, file, 256 << 10, 2);
  AlignedBuffer buffer(256 << 10);
  engine.wait(engine.submit_read(file, 0, buffer.span()));
  EXPECT_EQ(testing::first_mismatch(buffer.span(), 0, 2), -1);
}

TEST(FileOpen, BadEnvironmentValueIsAUsageError) {
  ScopedEnv backend("STRATA_AIO_BACKEND", "spdk");
  auto error = expect_throw<UserError>([] { Engine engine(testing::small_options()); });
  EXPECT_EQ(error.exit_status(), 2);
  EXPECT_NE(std::string(error.what()).find("STRATA_AIO_BACKEND=spdk"), std::string::npos);
  EXPECT_NE(error.fix().find("io_uring"), std::string::npos);
}

TEST(FileOpen, BadOptionsAreUsageErrors) {
  EngineOptions options = testing::small_options();
  options.block_size_bytes = 1000;
  auto error = expect_throw<UserError>([&] { Engine engine(options); });
  EXPECT_EQ(error.exit_status(), 2);
  EXPECT_NE(std::string(error.what()).find("block_size=1000"), std::string::npos);
  options = testing::small_options();
  options.queue_depth = 0;
  error = expect_throw<UserError>([&] { Engine engine(options); });
  EXPECT_NE(std::string(error.what()).find("queue_depth=0"), std::string::npos);
}

TEST(FileAlignment, MisalignedRequestsAreRefusedNamingWhat) {
  TempDir dir;
  Engine engine(testing::small_options());
  File file = engine.open(dir / "swap", OpenMode::create);
  AlignedBuffer buffer(16 << 10);
  auto what = [&](auto submit) {
    try {
      submit();
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(what([&] { (void)engine.submit_write(file, 512, buffer.span()); }).find("offset (512)"),
            std::string::npos);
  EXPECT_NE(what([&] {
              (void)engine.submit_write(file, 0, buffer.span().first(1000));
            }).find("length (1000)"),
            std::string::npos);
  EXPECT_NE(what([&] {
              (void)engine.submit_read(file, 0, buffer.span().subspan(8, 4096));
            }).find("buffer address"),
            std::string::npos);
  engine.wait_all();  // nothing was queued by the refused calls
}

TEST(FileRemove, RemovesTheFileAndItsSidecar) {
  TempDir dir;
  Engine engine(testing::small_options());
  {
    File file = engine.open(dir / "swap", OpenMode::create);
    testing::write_pattern(engine, file, 64 << 10, 1);
  }
  EXPECT_TRUE(std::filesystem::exists(sidecar_path(dir / "swap")));
  remove_file(dir / "swap");
  EXPECT_FALSE(std::filesystem::exists(dir / "swap"));
  EXPECT_FALSE(std::filesystem::exists(sidecar_path(dir / "swap")));
}

}  // namespace
}  // namespace strata::aio
