#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "aio/detail/checksum_table.h"

namespace strata::aio::detail {

// What a File owns; the engine's tickets point at it (its address survives moves of File).
struct FileState {
  std::string path;
  int fd = -1;
  std::int64_t alignment_bytes = 4096;
  bool direct = false;
  bool verify = false;
  bool writable = false;
  // Size as this process knows it; grown under allocate_mutex by the submitting thread.
  std::atomic<std::int64_t> size_bytes{0};
  std::mutex allocate_mutex;
  ChecksumTable checksums;

  // Grows the file with fallocate (or ftruncate where fallocate is not supported) to at least
  // `size_bytes` and the checksum table with it. Returns 0 or -errno.
  int ensure_size(std::int64_t target_size_bytes);
  // Writes the sidecar when checksums changed. Returns 0 or -errno.
  int save_checksums();

  FileState() = default;
  FileState(const FileState&) = delete;
  FileState& operator=(const FileState&) = delete;
  ~FileState();
};

}  // namespace strata::aio::detail
