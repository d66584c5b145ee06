#include "aio/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "base/assert.h"

namespace strata::aio {

AlignedBuffer::AlignedBuffer(std::int64_t size_bytes, std::int64_t alignment_bytes) {
  STRATA_ASSERT(size_bytes >= 0);
  STRATA_ASSERT(alignment_bytes > 0 && (alignment_bytes & (alignment_bytes - 1)) == 0);
  std::int64_t rounded = (size_bytes + alignment_bytes - 1) / alignment_bytes * alignment_bytes;
  if (rounded == 0) return;
  void* memory = std::aligned_alloc(static_cast<std::size_t>(alignment_bytes),
                                    static_cast<std::size_t>(rounded));
  if (memory == nullptr) throw std::bad_alloc();
  std::memset(memory, 0, static_cast<std::size_t>(rounded));
  data_ = static_cast<std::byte*>(memory);
  size_bytes_ = rounded;
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() {
  std::free(data_);
}

}  // namespace strata::aio
