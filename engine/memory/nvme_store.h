#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aio/engine.h"
#include "base/by_index.h"

namespace strata::engine::memory {

// Whether `nvme_path` is, or can be made, a folder for swap files: every component that exists is
// a directory and no symbolic link, and the deepest one that exists is writable by this user (the
// path itself, or the folder the missing ones will be made in). Makes nothing. Throws UserError
// (exit status 2) naming the path and the fix. `strata config check` runs it as train does.
void check_nvme_path(const std::filesystem::path& nvme_path);

// check_nvme_path, then makes the missing folders (mode 0700, private as the swap folders made in
// them), as DeepSpeed's swappers make theirs with os.makedirs.
void make_nvme_path(const std::filesystem::path& nvme_path);

struct NvmeStoreOptions {
  // offload_*.nvme_path: a writable directory, or one that can be made, reached through no
  // symlink (check_nvme_path).
  std::filesystem::path nvme_path;
  std::string job_name = "strata";  // strata.job_name
  int rank = 0;
  // A second store of the same rank (the parameters on another nvme_path than the optimizer
  // states) names itself here: it lives in `rank<r>-<store_name>/` with its own lock.
  std::string store_name;
  aio::EngineOptions aio;  // checksums are always verified, whatever aio.verify_checksums says
  aio::FaultPlan faults;   // tests only
  // Registered with the engine's rings (the pinned pool's arena), optional.
  std::span<std::byte> registered;
};

// A rank's swap space (docs/architecture.md, "The tiers"): one preallocated swap file under
// `<nvme_path>/strata-<job>/rank<r>/` (directory 0700, file 0600, O_DIRECT | O_NOFOLLOW through
// aio::Engine, CRC32C per 4 KiB block), with one extent per partition planned up front. The
// engine makes one per rank and swap directory: the parameter tier, the gradient reducer and the
// offloaded optimizer each reserve their extents in it, then it is opened once. The directory is
// held with flock on `strata-<job>/rank<r>.lock` while the store is open; a directory left by a
// crashed run is removed at open with one log line; it is removed at clean exit.
class NvmeStore {
 public:
  // A store with no extents yet, nothing made on disk. Throws check_nvme_path's UserError for an
  // nvme_path that is not a directory and cannot be made one, or a path through a symlink.
  explicit NvmeStore(NvmeStoreOptions options);
  // Reserves `partition_bytes` (each extent rounded up to 4 KiB) and opens: a store of one user.
  NvmeStore(NvmeStoreOptions options, std::span<const std::int64_t> partition_bytes);
  // Before open(): adds one extent per element of `partition_bytes`; returns the first's index
  // (the partitions a caller names are that index plus its own).
  int reserve(std::span<const std::int64_t> partition_bytes);
  // Makes nvme_path when it is missing (make_nvme_path), then creates the swap file with every
  // extent reserved, `registered` (optional) memory registered with the engine's rings. Throws
  // UserError for an unwritable nvme_path, too little free space
  // for the plan (statvfs), or a rank directory held by a live job (named from the lock file).
  void open(std::span<std::byte> registered = {});
  bool is_open() const noexcept { return engine_ != nullptr; }
  // Waits for transfers still in flight, then removes the swap file, its checksums, the rank
  // directory, the lock file and the job directory when empty.
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // Writes `source` (at most the extent's size, a multiple of 4 KiB, 4 KiB-aligned memory) to
  // the start of partition `partition`'s extent.
  aio::Ticket submit_write(int partition, std::span<const std::byte> source);
  // Writes `source` (a multiple of 4 KiB) at `offset` (a multiple of 4 KiB) into the extent, the
  // rest of the extent unchanged.
  aio::Ticket submit_write(int partition, std::int64_t offset, std::span<const std::byte> source);
  // Reads the first `target.size()` bytes of partition `partition`'s extent.
  aio::Ticket submit_read(int partition, std::span<std::byte> target);
  // Reads `target.size()` bytes (a multiple of 4 KiB) at `offset` (a multiple of 4 KiB) of the
  // extent.
  aio::Ticket submit_read(int partition, std::int64_t offset, std::span<std::byte> target);
  // Throws aio::IoError / aio::ChecksumError (they name the swap file, under nvme_path, and the
  // offset) for a failed transfer, ENOSPC and EIO included.
  void wait(aio::Ticket ticket);
  // Waits for everything outstanding; throws the first error.
  void wait_all();

  int partition_count() const noexcept { return offsets_.size(); }
  std::int64_t extent_bytes(int partition) const;
  std::int64_t extent_offset(int partition) const;
  // The sum of all extents: the swap file's size.
  std::int64_t planned_bytes() const noexcept { return planned_bytes_; }
  // The sum of extents [first, first + count): one user's share of the file.
  std::int64_t planned_bytes(int first, int count) const;
  const std::filesystem::path& directory() const noexcept { return rank_directory_; }
  const std::filesystem::path& swap_file() const noexcept { return swap_path_; }
  // The memory open() registered with the engine's rings (empty when none).
  std::span<std::byte> registered() const noexcept { return registered_; }
  // Completions the engine has reaped so far (0 before open()): the numbering of an
  // aio::FaultPlan's faults, so that a test can plant one at a chosen point of a run.
  std::int64_t completions() const;

 private:
  // open(): the refusal of a drive too small for the plan, and the job directory's lock.
  void check_free_space() const;
  void take_lock();
  void check_partition(int partition, std::int64_t bytes) const;

  NvmeStoreOptions options_;
  std::filesystem::path job_directory_;
  std::filesystem::path rank_directory_;
  std::filesystem::path lock_path_;
  std::filesystem::path swap_path_;
  int lock_fd_ = -1;
  base::ByIndex<std::int64_t> offsets_;
  base::ByIndex<std::int64_t> sizes_;
  std::int64_t planned_bytes_ = 0;
  std::span<std::byte> registered_;
  std::unique_ptr<aio::Engine> engine_;
  std::optional<aio::File> file_;  // optional: aio::File's default constructor is not usable here
};

}  // namespace strata::engine::memory
