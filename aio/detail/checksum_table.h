#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <shared_mutex>
#include <vector>

namespace strata::aio::detail {

// CRC32C (ISA-L crc32_iscsi) of `length_bytes` bytes.
std::uint32_t crc32c(const std::byte* data, std::int64_t length_bytes) noexcept;

// The checksums of one file: one CRC32C per 4 KiB sector, each with a "recorded" bit, so that any
// aligned read can be verified whatever pieces wrote it (docs/aio.md, "Checksums").
//
// Threads: grow() runs on the submitting thread under the exclusive lock; record() and verify()
// run on ring threads under the shared lock and touch distinct sectors (two transfers in flight
// over the same sector are a caller bug).
class ChecksumTable {
 public:
  static constexpr std::int64_t sector_bytes = 4096;

  struct Mismatch {
    std::int64_t sector_offset;
    std::uint32_t expected;
    std::uint32_t actual;
    bool recorded;
  };

  // Makes room for the sectors of the first `size_bytes` bytes.
  void grow(std::int64_t size_bytes);
  // Records the checksums of the sectors of [offset, offset + length) from `data`.
  void record(std::int64_t offset, const std::byte* data, std::int64_t length_bytes);
  // The first sector of [offset, offset + length) whose data does not match, if any.
  std::optional<Mismatch> verify(std::int64_t offset, const std::byte* data,
                                 std::int64_t length_bytes) const;

  bool dirty() const noexcept { return dirty_.load(std::memory_order_relaxed); }
  // Writes the sidecar atomically (temporary file, fsync, rename), mode 0600. Returns 0 or
  // -errno.
  int save(const std::filesystem::path& sidecar, std::int64_t data_size_bytes);
  // Reads a sidecar written by save(). Returns 0, -ENOENT when missing, -ESTALE when it
  // describes another size of data, -EBADMSG when it is corrupt, or another -errno.
  int load(const std::filesystem::path& sidecar, std::int64_t data_size_bytes);

 private:
  static constexpr std::uint64_t recorded_bit = std::uint64_t{1} << 32;
  mutable std::shared_mutex mutex_;
  std::vector<std::uint64_t> entries_;
  std::atomic<bool> dirty_{false};
};

}  // namespace strata::aio::detail
