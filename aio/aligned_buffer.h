#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace strata::aio {

// Memory aligned for O_DIRECT: the start is a multiple of `alignment_bytes` (4 KiB by default,
// at least every File::alignment_bytes() this library hands out) and the size is rounded up to
// it. Zero-filled. Move-only owner; the memory must outlive every ticket that uses it.
class AlignedBuffer {
 public:
  static constexpr std::int64_t default_alignment_bytes = 4096;

  AlignedBuffer() = default;
  // Throws std::bad_alloc when the memory is not there. `alignment_bytes` is a power of two.
  explicit AlignedBuffer(std::int64_t size_bytes,
                         std::int64_t alignment_bytes = default_alignment_bytes);
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  std::byte* data() noexcept { return data_; }
  const std::byte* data() const noexcept { return data_; }
  std::int64_t size_bytes() const noexcept { return size_bytes_; }
  std::span<std::byte> span() noexcept { return {data_, static_cast<std::size_t>(size_bytes_)}; }
  std::span<const std::byte> span() const noexcept {
    return {data_, static_cast<std::size_t>(size_bytes_)};
  }

 private:
  std::byte* data_ = nullptr;
  std::int64_t size_bytes_ = 0;
};

}  // namespace strata::aio
