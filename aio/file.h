#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "aio/options.h"

namespace strata::aio {

class FaultPlan;
namespace detail {
struct FileState;
}

enum class OpenMode {
  read,        // an existing file, read only
  read_write,  // an existing file
  create,      // created (mode 0600) when missing, reused (not truncated) when present
};

struct FileOptions {
  DirectMode direct = DirectMode::optional;
  bool verify_checksums = true;
  // Only tests set this (refuse_direct_open); it must outlive the File.
  const FaultPlan* faults = nullptr;
};

// One open file for aio::Engine: opened O_DIRECT | O_CLOEXEC | O_NOFOLLOW (a symlink is
// refused), created mode 0600, grown with fallocate before a write extends it. Its alignment is
// decided once, here: every buffer, offset and length given to the engine for this file must be
// a multiple of alignment_bytes() (4 KiB, or the device's direct-I/O alignment when larger);
// misaligned requests are refused, never bounced (docs/aio.md says why).
//
// With verification on, the CRC32C of every 4 KiB sector written is kept in memory and, on
// sync() and on close, in the sidecar file `<path>.crc32c`, which a later open reads back.
// Move-only; the engine refers to the file by address of its state, so a File must outlive the
// tickets that use it.
class File {
 public:
  // Throws IoError (op open) naming the path and errno: ENOENT, EACCES, ELOOP for a symlink,
  // EINVAL when O_DIRECT is refused and `options.direct` is required. Throws UserError when
  // verification is on and an existing, non-empty file has no (or a stale) sidecar.
  static File open(const std::filesystem::path& path, OpenMode mode, const FileOptions& options);

  File() = default;
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  // Writes the sidecar when checksums changed since the last sync (a failure is logged; call
  // sync() to see it as an exception), then closes.
  ~File();

  bool is_open() const noexcept { return state_ != nullptr; }
  const std::string& path() const noexcept;
  std::int64_t alignment_bytes() const noexcept;
  // False when the file system refused O_DIRECT (or it was turned off): the page cache is used.
  bool direct() const noexcept;
  bool verifies_checksums() const noexcept;
  // The size as this process knows it: the size at open, grown by allocate() and writes.
  std::int64_t size_bytes() const noexcept;

  // Preallocates (fallocate) so the file is at least `size_bytes` long. Throws IoError (op
  // allocate): ENOSPC names the path.
  void allocate(std::int64_t size_bytes);
  // fdatasync, then writes the checksum sidecar (when verifying). Throws IoError (op sync).
  void sync();

  detail::FileState* state() const noexcept { return state_.get(); }

 private:
  explicit File(std::unique_ptr<detail::FileState> state);
  std::unique_ptr<detail::FileState> state_;
};

// Removes a file written through aio and its checksum sidecar; missing ones are not an error.
void remove_file(const std::filesystem::path& path);

// The sidecar path that holds the checksums of `path`.
std::filesystem::path sidecar_path(const std::filesystem::path& path);

}  // namespace strata::aio
