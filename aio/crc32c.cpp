#include "aio/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>

namespace strata::aio {

void Crc32c::update(std::span<const std::byte> bytes) noexcept {
  // ISA-L takes an int length and a non-const pointer it only reads.
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  while (!bytes.empty()) {
    const std::size_t length = std::min(bytes.size(), kPiece);
    auto* data = const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(bytes.data()));
    state_ = crc32_iscsi(data, static_cast<int>(length), state_);
    bytes = bytes.subspan(length);
  }
}

std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept {
  Crc32c crc;
  crc.update(bytes);
  return crc.value();
}

}  // namespace strata::aio
