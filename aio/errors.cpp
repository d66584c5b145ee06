#include "aio/errors.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace strata::aio {
namespace {

std::string errno_text(int errno_value) {
  if (errno_value == 0) return "read past the end of the file";
  const char* name = strerrorname_np(errno_value);
  return fmt::format("{} ({})", std::strerror(errno_value), name != nullptr ? name : "?");
}

std::string cause_of(Op op, const std::string& path, std::int64_t offset, std::int64_t length,
                     std::int64_t done, int errno_value) {
  if (op == Op::open) return fmt::format("cannot open {}: {}", path, errno_text(errno_value));
  if (op == Op::sync) return fmt::format("cannot sync {}: {}", path, errno_text(errno_value));
  if (op == Op::allocate) {
    return fmt::format("cannot preallocate {} bytes for {}: {}", length, path,
                       errno_text(errno_value));
  }
  return fmt::format("{} of {} failed at offset {} (length {}, {} bytes done): {}", to_string(op),
                     path, offset, length, done, errno_text(errno_value));
}

std::string fix_of(Op op, int errno_value) {
  switch (errno_value) {
    case 0:
      return "read only what was written: the file is shorter than the offset plus length";
    case ENOSPC:
    case EDQUOT:
      return "free space on that disk, or point nvme_path (io-bench --path) at a larger one";
    case EIO:
      return "the device reported a media or transport error: check `dmesg` and the drive's "
             "SMART log, and move nvme_path to a healthy disk";
    case EACCES:
    case EPERM:
    case EROFS:
      return "make the directory writable by this user (or choose another nvme_path)";
    case ENOENT:
      return op == Op::open ? "create the directory first, or fix the path" : "fix the path";
    case ELOOP:
      return "the path is a symbolic link, which strata refuses to follow for its files: point "
             "at the real location";
    case EINVAL:
      return op == Op::open ? "the file system refuses O_DIRECT: put nvme_path on a local disk "
                              "file system (ext4, xfs), or set STRATA_AIO_DIRECT=optional or off"
                            : "the kernel refused the request (a strata bug after its alignment "
                              "check): set STRATA_AIO_DIRECT=off to bypass O_DIRECT and report it";
    case EBADF:
      return "the file was closed while I/O was in flight (a strata bug): report it";
    default:
      return "check the disk and the path";
  }
}

}  // namespace

std::string_view to_string(Op op) {
  switch (op) {
    case Op::open:
      return "open";
    case Op::allocate:
      return "allocate";
    case Op::read:
      return "read";
    case Op::write:
      return "write";
    case Op::sync:
      return "sync";
  }
  return "?";
}

IoError::IoError(Op op, std::string path, std::int64_t offset, std::int64_t length_bytes,
                 std::int64_t done_bytes, int errno_value)
    : IoError(op, path, offset, length_bytes, done_bytes, errno_value,
              cause_of(op, path, offset, length_bytes, done_bytes, errno_value),
              fix_of(op, errno_value)) {}

IoError::IoError(Op op, std::string path, std::int64_t offset, std::int64_t length_bytes,
                 std::int64_t done_bytes, int errno_value, const std::string& cause,
                 std::string fix)
    : UserError(cause, std::move(fix), 1),
      op_(op),
      path_(std::move(path)),
      offset_(offset),
      length_bytes_(length_bytes),
      done_bytes_(done_bytes),
      errno_value_(errno_value) {}

ChecksumError::ChecksumError(std::string path, std::int64_t sector_offset, std::uint32_t expected,
                             std::uint32_t actual, bool recorded)
    : IoError(Op::read, path, sector_offset, 4096, 0, EBADMSG,
              recorded ? fmt::format("checksum mismatch reading {} at offset {}: CRC32C of the "
                                     "4 KiB sector is {:#010x}, {:#010x} was recorded when it "
                                     "was written",
                                     path, sector_offset, actual, expected)
                       : fmt::format("no checksum recorded for {} at offset {}: the sector was "
                                     "never written through strata with verification on",
                                     path, sector_offset),
              recorded ? "the data on disk changed after it was written (media error, another "
                         "writer, or a bad cable): do not trust this file; check `dmesg` and "
                         "the drive's SMART log"
                       : "read only sectors written with verification on, or turn "
                         "verify_checksums off"),
      expected_(expected),
      actual_(actual),
      recorded_(recorded) {}

}  // namespace strata::aio
