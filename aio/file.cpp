#include "aio/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "aio/detail/file_state.h"
#include "aio/errors.h"
#include "aio/fault_plan.h"
#include "base/assert.h"
#include "base/log.h"

namespace strata::aio {
namespace {

// The direct-I/O alignment, decided once per file: 4 KiB (the page size, and at least the
// logical block size of every NVMe and SATA device in use), or what statx reports when the
// device wants more. Worked example: a 512e drive reports dio_offset_align 512, so 4096 stays;
// a 4Kn drive reports 4096; a device with 8 KiB sectors would raise it to 8192.
std::int64_t direct_alignment(int fd) {
  std::int64_t alignment = 4096;
#ifdef STATX_DIOALIGN
  struct statx info {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &info) == 0 &&
      (info.stx_mask & STATX_DIOALIGN) != 0) {
    alignment = std::max<std::int64_t>(alignment, info.stx_dio_offset_align);
    alignment = std::max<std::int64_t>(alignment, info.stx_dio_mem_align);
  }
#endif
  STRATA_ASSERT((alignment & (alignment - 1)) == 0);
  return alignment;
}

int open_flags(OpenMode mode) {
  int flags = O_CLOEXEC | O_NOFOLLOW;
  if (mode == OpenMode::read) return flags | O_RDONLY;
  if (mode == OpenMode::create) flags |= O_CREAT;
  return flags | O_RDWR;
}

// Opens with O_DIRECT where allowed; falls back to buffered I/O (one warning per cause) when the
// file system refuses it and the mode allows. Returns the fd or throws IoError.
int open_fd(const std::string& path, OpenMode mode, const FileOptions& options, bool& direct) {
  int flags = open_flags(mode);
  direct = options.direct != DirectMode::off;
  if (direct) {
    bool refused = options.faults != nullptr && options.faults->direct_open_refused();
    int fd = refused ? -1 : ::open(path.c_str(), flags | O_DIRECT, 0600);
    int error = refused ? EINVAL : errno;
    if (fd >= 0) return fd;
    if (error != EINVAL) throw IoError(Op::open, path, 0, 0, 0, error);
    if (options.direct == DirectMode::required) throw IoError(Op::open, path, 0, 0, 0, EINVAL);
    static std::once_flag warned;
    std::call_once(warned, [&] {
      base::logger("aio").warn(
          "O_DIRECT refused by the file system of path={} (tmpfs before Linux 6.6, some FUSE "
          "mounts): using buffered I/O through the page cache; figures include its effects",
          path);
    });
    direct = false;
  }
  int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) throw IoError(Op::open, path, 0, 0, 0, errno);
  return fd;
}

void load_checksums(detail::FileState& state) {
  int result = state.checksums.load(sidecar_path(state.path), state.size_bytes.load());
  if (result == 0) return;
  if (result == -ENOENT && state.size_bytes.load() == 0) return;
  std::string sidecar = sidecar_path(state.path).string();
  std::string why =
      result == -ENOENT ? "has no checksum sidecar " + sidecar
      : result == -ESTALE
          ? "has a stale checksum sidecar " + sidecar + " (it describes another file size)"
      : result == -EBADMSG
          ? "has a corrupt checksum sidecar " + sidecar
          : "cannot read its checksum sidecar " + sidecar + ": " + std::strerror(-result);
  throw UserError("cannot verify " + state.path + ": the file " + why,
                  "open it with checksum verification off (aio verify_checksums=false, "
                  "io-bench --verify off), or write it again through strata");
}

}  // namespace

std::filesystem::path sidecar_path(const std::filesystem::path& path) {
  std::filesystem::path sidecar = path;
  sidecar += ".crc32c";
  return sidecar;
}

void remove_file(const std::filesystem::path& path) {
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  std::filesystem::remove(sidecar_path(path), ignored);
}

File File::open(const std::filesystem::path& path, OpenMode mode, const FileOptions& options) {
  auto state = std::make_unique<detail::FileState>();
  state->path = path.string();
  bool direct = false;
  state->fd = open_fd(state->path, mode, options, direct);
  state->direct = direct;
  state->verify = options.verify_checksums;
  state->writable = mode != OpenMode::read;
  struct stat info {};
  if (::fstat(state->fd, &info) != 0) throw IoError(Op::open, state->path, 0, 0, 0, errno);
  if (!S_ISREG(info.st_mode)) throw IoError(Op::open, state->path, 0, 0, 0, EINVAL);
  state->size_bytes.store(info.st_size);
  state->alignment_bytes = direct ? direct_alignment(state->fd) : 4096;
  if (state->verify) load_checksums(*state);
  return File(std::move(state));
}

File::File(std::unique_ptr<detail::FileState> state) : state_(std::move(state)) {}
File::File(File&& other) noexcept = default;
File& File::operator=(File&& other) noexcept = default;
File::~File() = default;

const std::string& File::path() const noexcept {
  return state_->path;
}
std::int64_t File::alignment_bytes() const noexcept {
  return state_->alignment_bytes;
}
bool File::direct() const noexcept {
  return state_->direct;
}
bool File::verifies_checksums() const noexcept {
  return state_->verify;
}
std::int64_t File::size_bytes() const noexcept {
  return state_->size_bytes.load();
}

void File::allocate(std::int64_t size_bytes) {
  STRATA_ASSERT(state_ != nullptr);
  int result = state_->ensure_size(size_bytes);
  if (result != 0) throw IoError(Op::allocate, state_->path, 0, size_bytes, 0, -result);
}

void File::sync() {
  STRATA_ASSERT(state_ != nullptr);
  if (state_->writable && ::fdatasync(state_->fd) != 0) {
    throw IoError(Op::sync, state_->path, 0, size_bytes(), 0, errno);
  }
  int result = state_->save_checksums();
  if (result != 0) {
    throw IoError(Op::sync, sidecar_path(state_->path).string(), 0, 0, 0, -result);
  }
}

namespace detail {

int FileState::ensure_size(std::int64_t target_size_bytes) {
  std::lock_guard lock(allocate_mutex);
  if (verify) checksums.grow(target_size_bytes);
  std::int64_t current = size_bytes.load();
  if (target_size_bytes <= current) return 0;
  if (::fallocate(fd, 0, current, target_size_bytes - current) != 0) {
    if (errno != EOPNOTSUPP) return -errno;
    if (::ftruncate(fd, target_size_bytes) != 0) return -errno;
  }
  size_bytes.store(target_size_bytes);
  return 0;
}

int FileState::save_checksums() {
  if (!verify || !checksums.dirty()) return 0;
  return checksums.save(sidecar_path(path), size_bytes.load());
}

FileState::~FileState() {
  if (fd < 0) return;
  int result = save_checksums();
  if (result != 0) {
    base::logger("aio").error("could not write the checksum sidecar of path={}: {}", path,
                              std::strerror(-result));
  }
  ::close(fd);
}

}  // namespace detail
}  // namespace strata::aio
