#pragma once

#include <cstdint>
#include <string>

#include "base/error.h"

namespace strata::aio {

// The operation an error happened in.
enum class Op { open, allocate, read, write, sync };

std::string_view to_string(Op op);

// A failed I/O: which operation, on which file, at which offset and length, how many bytes of it
// were done, and the errno (0 for a read that ran past the end of the file). Made only by
// Engine::wait / wait_all from the result kept in the ticket, and by File::open / File::sync.
// It is a UserError: what() names all of the above with the errno text, fix() says what to do.
class IoError : public UserError {
 public:
  IoError(Op op, std::string path, std::int64_t offset, std::int64_t length_bytes,
          std::int64_t done_bytes, int errno_value);

  Op op() const noexcept { return op_; }
  const std::string& path() const noexcept { return path_; }
  std::int64_t offset() const noexcept { return offset_; }
  std::int64_t length_bytes() const noexcept { return length_bytes_; }
  std::int64_t done_bytes() const noexcept { return done_bytes_; }
  // 0 when a read ran past the end of the file.
  int errno_value() const noexcept { return errno_value_; }

 protected:
  IoError(Op op, std::string path, std::int64_t offset, std::int64_t length_bytes,
          std::int64_t done_bytes, int errno_value, const std::string& cause, std::string fix);

 private:
  Op op_;
  std::string path_;
  std::int64_t offset_;
  std::int64_t length_bytes_;
  std::int64_t done_bytes_;
  int errno_value_;
};

// A read whose bytes do not match the CRC32C recorded when they were written (or a sector that
// has no recorded checksum). offset() is the file offset of the first bad 4 KiB sector;
// errno_value() is EBADMSG. Never retried: the data on disk (or the bus) is wrong.
class ChecksumError : public IoError {
 public:
  ChecksumError(std::string path, std::int64_t sector_offset, std::uint32_t expected,
                std::uint32_t actual, bool recorded);

  std::uint32_t expected() const noexcept { return expected_; }
  std::uint32_t actual() const noexcept { return actual_; }
  // False when no checksum was ever recorded for the sector.
  bool recorded() const noexcept { return recorded_; }

 private:
  std::uint32_t expected_;
  std::uint32_t actual_;
  bool recorded_;
};

}  // namespace strata::aio
