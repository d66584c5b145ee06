#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "aio/engine.h"
#include "base/by_index.h"
#include "gpu/device.h"

namespace strata::engine::memory {

class NvmeStore;

enum class Tier { nvme, cpu, gpu };
inline constexpr int kTierCount = 3;

// Where a partition's bytes are. A moving partition holds memory in both tiers.
enum class State {
  on_nvme,       // in its NVMe extent only
  reading,       // NVMe -> CPU in flight
  in_cpu,        // in CPU memory (its NVMe extent, if any, is stale)
  uploading,     // CPU -> GPU in flight
  on_gpu,        // in device memory
  downloading,   // GPU -> CPU in flight
  writing_back,  // CPU -> NVMe in flight
  patching,      // a piece of its NVMe extent is being overwritten; the rest stays as it was
  lost,          // a move failed: no tier holds bytes known to be good
};
std::string_view to_string(State state);
std::string_view to_string(Tier tier);

enum class Direction { h2d, d2h, nvme_read, nvme_write };
inline constexpr int kDirectionCount = 4;
std::string_view to_string(Direction direction);

// Exact byte accounting, exported to `strata train`'s metrics.
struct ResidencyCounters {
  std::array<std::int64_t, kTierCount> resident_bytes{};  // indexed by Tier
  std::array<std::int64_t, kTierCount> peak_resident_bytes{};
  std::array<std::int64_t, kDirectionCount> moved_bytes{};  // indexed by Direction

  std::int64_t resident(Tier tier) const { return resident_bytes[index(tier)]; }
  std::int64_t peak_resident(Tier tier) const { return peak_resident_bytes[index(tier)]; }
  std::int64_t moved(Direction direction) const { return moved_bytes[index(direction)]; }
  std::int64_t& moved(Direction direction) { return moved_bytes[index(direction)]; }

 private:
  template <class Enum>
  static std::size_t index(Enum value) {
    return static_cast<std::size_t>(value);
  }
};

using PartitionId = int;
// Who a partition belongs to (the parameter tier, the optimizer, the gradients): the rank's one
// book counts each user's partitions apart as well as all of them together.
using User = int;

// The memory manager's book of partitions (docs/architecture.md, "The tiers"): each partition (a
// contiguous slice of a flat buffer: params, grads or optimizer states of one sub-group) is in
// exactly one State, changed only here. Moves are tickets; the bytes of a partition are reachable
// only through a CpuView, which comes from a finished read or from a partition already in CPU
// memory, so reading a partition whose move has not completed cannot be written. One book per
// rank holds the partitions of every user, whichever store holds their extents. Thread-safe.
class Residency {
 public:
  // The bytes of a partition in CPU memory. Move-only; handing it to begin_write gives it up.
  class CpuView {
   public:
    CpuView() = default;
    CpuView(CpuView&& other) noexcept;
    CpuView& operator=(CpuView&& other) noexcept;
    CpuView(const CpuView&) = delete;
    CpuView& operator=(const CpuView&) = delete;
    PartitionId partition() const noexcept { return partition_; }
    std::span<std::byte> bytes() const noexcept { return bytes_; }
    explicit operator bool() const noexcept { return partition_ >= 0; }

   private:
    friend class Residency;
    CpuView(PartitionId partition, std::span<std::byte> bytes)
        : partition_(partition), bytes_(bytes) {}
    PartitionId partition_ = -1;
    std::span<std::byte> bytes_;
  };

  // A partition in device memory: usable only by stream work (on CUDA the host cannot read it).
  class GpuView {
   public:
    GpuView() = default;
    GpuView(GpuView&& other) noexcept;
    GpuView& operator=(GpuView&& other) noexcept;
    GpuView(const GpuView&) = delete;
    GpuView& operator=(const GpuView&) = delete;
    PartitionId partition() const noexcept { return partition_; }
    void* device_memory() const noexcept { return device_; }
    explicit operator bool() const noexcept { return partition_ >= 0; }

   private:
    friend class Residency;
    GpuView(PartitionId partition, void* device) : partition_(partition), device_(device) {}
    PartitionId partition_ = -1;
    void* device_ = nullptr;
  };

  // A move in flight. Redeem it exactly once with the matching finish_*.
  class [[nodiscard]] Move {
   public:
    Move() = default;
    Move(Move&& other) noexcept;
    Move& operator=(Move&& other) noexcept;
    Move(const Move&) = delete;
    Move& operator=(const Move&) = delete;
    PartitionId partition() const noexcept { return partition_; }
    explicit operator bool() const noexcept { return partition_ >= 0; }

   private:
    friend class Residency;
    Move(PartitionId partition, aio::Ticket ticket, std::span<std::byte> bytes)
        : partition_(partition), ticket_(ticket), bytes_(bytes) {}
    PartitionId partition_ = -1;
    aio::Ticket ticket_;
    std::span<std::byte> bytes_;
    std::unique_ptr<gpu::Event> event_;  // GPU moves: recorded after the copy
  };

  Residency() = default;

  // A new user of the book, named in logs (`what`: "parameter shards").
  User add_user(std::string what);
  const std::string& user_name(User user) const;
  int user_count() const;

  // A partition of `user` that lives in CPU memory `memory` (state in_cpu).
  PartitionId add_in_cpu(User user, std::string name, std::span<std::byte> memory);
  // A partition of `bytes` (a multiple of 4 KiB) in the NVMe extent `extent` of `store` (state
  // on_nvme). The store must outlive the book's use of the partition.
  PartitionId add_on_nvme(User user, std::string name, std::int64_t bytes, NvmeStore& store,
                          int extent);
  // A partition with the NVMe extent `extent` of `store` whose bytes are first made in CPU memory
  // `memory` (state in_cpu; its extent holds nothing yet): how a tier is filled at start.
  PartitionId add_in_cpu_with_extent(User user, std::string name, std::span<std::byte> memory,
                                     NvmeStore& store, int extent);

  State state(PartitionId partition) const;
  std::int64_t bytes(PartitionId partition) const;
  const std::string& name(PartitionId partition) const;
  User user(PartitionId partition) const;
  int partition_count() const;

  // The view of a partition in state in_cpu (asserted).
  CpuView view(PartitionId partition);

  // on_nvme -> reading, into `staging` (4 KiB aligned, at least the partition's bytes).
  Move begin_read(PartitionId partition, std::span<std::byte> staging);
  // reading -> in_cpu; the view of the staging memory. A failed read leaves the partition lost
  // and rethrows the store's error (aio::IoError / ChecksumError name file and offset).
  CpuView finish_read(Move move);
  // in_cpu -> writing_back (the view is given up).
  Move begin_write(CpuView view);
  // writing_back or patching -> on_nvme; a failure leaves the partition lost and rethrows.
  void finish_write(Move move);
  // on_nvme -> patching: writes `source` (4 KiB aligned memory, a multiple of 4 KiB) over bytes
  // [offset, offset + source.size()) of the partition's extent (offset a multiple of 4 KiB), the
  // rest of the extent unchanged: the piece of a parameter shard that one optimizer sub-group
  // covers. `source` must stay untouched until finish_write, which redeems it.
  Move begin_patch(PartitionId partition, std::int64_t offset, std::span<const std::byte> source);
  // in_cpu -> on_nvme without writing: only for a partition read from NVMe and not changed since
  // (a checkpoint's read), so its extent still holds the same bytes.
  void drop_clean(CpuView view);
  // on_nvme -> in_cpu with new contents: `memory` (the partition's bytes, 4 KiB aligned) already
  // holds the partition's next value, which replaces what its extent holds once written back (a
  // parameter shard after an optimizer step). Nothing is read.
  CpuView replace(PartitionId partition, std::span<std::byte> memory);

  // in_cpu -> uploading: enqueues the copy of the view's bytes to `device_target` (device memory
  // of at least the partition's bytes) on `stream`, and records an event after it.
  Move begin_upload(CpuView view, gpu::Device& device, gpu::Stream& stream, void* device_target);
  // uploading -> on_gpu once the copy has run (counted h2d). A failed copy: lost, rethrown.
  GpuView finish_upload(Move move);
  // on_gpu -> downloading: enqueues the copy back to `host_target` (at least the partition's
  // bytes).
  Move begin_download(GpuView view, gpu::Device& device, gpu::Stream& stream,
                      std::span<std::byte> host_target);
  // downloading -> in_cpu (counted d2h); the view of host_target.
  CpuView finish_download(Move move);

  // Every user's partitions together, and one user's.
  ResidencyCounters counters() const;
  ResidencyCounters counters(User user) const;

 private:
  struct Partition {
    User user = -1;
    std::string name;
    std::int64_t bytes = 0;
    State state = State::on_nvme;
    NvmeStore* store = nullptr;  // holds its extent (null: CPU only)
    int extent = -1;
    std::span<std::byte> memory;  // CPU memory while in_cpu / writing_back
    void* device = nullptr;       // device memory while uploading / on_gpu / downloading
  };
  void enter(Partition& partition, State state);  // mutex_ held
  // Counts a finished move of `bytes` in `direction` for the partition's user and the book.
  void count_move(const Partition& partition, Direction direction, std::int64_t bytes);
  PartitionId add(Partition partition, State state);  // mutex_ not held
  void wait_for_copy(Move& move);                     // mutex_ not held
  NvmeStore& store_of(PartitionId partition);         // mutex_ not held
  Partition& at(PartitionId partition);
  const Partition& at(PartitionId partition) const;

  mutable std::mutex mutex_;
  base::ByIndex<Partition> partitions_;
  struct UserBook {
    std::string what;
    ResidencyCounters counters;
  };
  base::ByIndex<UserBook> users_;
  ResidencyCounters counters_;  // every user's
};

}  // namespace strata::engine::memory
