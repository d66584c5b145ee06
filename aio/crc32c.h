#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace strata::aio {

// CRC32C (Castagnoli, ISA-L's crc32_iscsi) as every other tool computes it: crc32c of
// "123456789" is 0xe3069283, the value Python's `crc32c` package and `gsutil hash -c` give. For
// data that arrives in pieces, feed the pieces in order to one Crc32c.
class Crc32c {
 public:
  void update(std::span<const std::byte> bytes) noexcept;
  std::uint32_t value() const noexcept { return ~state_; }

 private:
  std::uint32_t state_ = 0xFFFFFFFFu;
};

std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept;

}  // namespace strata::aio
