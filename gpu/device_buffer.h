#pragma once

#include <cstdint>
#include <utility>

namespace strata::gpu {

namespace detail {

// Who gives an allocation back: the device (or its pinned allocator) that made it. A buffer keeps
// a pointer to its owner, so a buffer must not outlive its device (the device asserts that none
// is live when it is destroyed).
class AllocationOwner {
 public:
  virtual void release(void* data, std::int64_t bytes) noexcept = 0;

 protected:
  AllocationOwner() = default;
  AllocationOwner(const AllocationOwner&) = default;
  AllocationOwner& operator=(const AllocationOwner&) = default;
  virtual ~AllocationOwner() = default;
};

}  // namespace detail

// The one move-only owner of an allocation (STYLE.md, "Ownership"). Destroying or resetting it
// gives the memory back at once: it does not wait for queued stream work, so synchronize (or wait
// on an event) before dropping memory that a queued op still touches. The host backend catches a
// violation in debug builds; the CUDA backend frees stream-ordered under the same rule.
//
// `Kind` only keeps device and pinned buffers apart as types (see the aliases below).
template <class Kind>
class BasicBuffer {
 public:
  BasicBuffer() noexcept = default;
  BasicBuffer(void* data, std::int64_t bytes, detail::AllocationOwner* owner) noexcept
      : data_(data), bytes_(bytes), owner_(owner) {}

  BasicBuffer(BasicBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)),
        owner_(std::exchange(other.owner_, nullptr)) {}
  BasicBuffer& operator=(BasicBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      owner_ = std::exchange(other.owner_, nullptr);
    }
    return *this;
  }
  BasicBuffer(const BasicBuffer&) = delete;
  BasicBuffer& operator=(const BasicBuffer&) = delete;
  ~BasicBuffer() { reset(); }

  // The first byte, or nullptr for an empty buffer.
  void* data() const noexcept { return data_; }

  // The first byte as a T* (the caller knows what the bytes hold).
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }

  // The size asked for, in bytes.
  std::int64_t bytes() const noexcept { return bytes_; }

  bool empty() const noexcept { return data_ == nullptr; }
  explicit operator bool() const noexcept { return data_ != nullptr; }

  // Gives up the memory without giving it back: its owner takes it back another way (the
  // stream-ordered memory frees its arena's buffers when their stream reaches the release).
  // Returns the first byte; the buffer becomes empty.
  void* disown() noexcept {
    owner_ = nullptr;
    bytes_ = 0;
    return std::exchange(data_, nullptr);
  }

  // Gives the memory back now; the buffer becomes empty.
  void reset() noexcept {
    if (owner_ != nullptr) owner_->release(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
    owner_ = nullptr;
  }

 private:
  void* data_ = nullptr;
  std::int64_t bytes_ = 0;
  detail::AllocationOwner* owner_ = nullptr;
};

struct DeviceMemoryKind {};
struct PinnedMemoryKind {};

// Device memory from `Device::allocate`: counted against the device's budget; on CUDA not
// readable by host code, so touch it only through stream copies, fills and kernels.
using DeviceBuffer = BasicBuffer<DeviceMemoryKind>;

// Page-locked host memory from `Device::allocate_pinned`, 4 KiB aligned: the staging memory of
// every H2D/D2H copy and NVMe transfer. Host code reads and writes it directly.
using PinnedBuffer = BasicBuffer<PinnedMemoryKind>;

}  // namespace strata::gpu
