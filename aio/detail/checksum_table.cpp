#include "aio/detail/checksum_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "aio/crc32c.h"
#include "base/assert.h"

namespace strata::aio::detail {
namespace {

// Sidecar layout, little endian (x86-64 and arm64 both are): a 48-byte header, then one uint64
// per sector (bit 32 = recorded, bits 0-31 = CRC32C).
constexpr char sidecar_magic[16] = "STRATA-CRC32C-1";
struct SidecarHeader {
  char magic[16];
  std::uint64_t sector_bytes;
  std::uint64_t data_size_bytes;
  std::uint64_t sector_count;
  std::uint32_t entries_crc;
  std::uint32_t reserved;
};
static_assert(sizeof(SidecarHeader) == 48);

int write_all(int fd, const void* data, std::size_t length) {
  const char* cursor = static_cast<const char*>(data);
  while (length > 0) {
    ssize_t written = ::write(fd, cursor, length);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) return -errno;
    cursor += written;
    length -= static_cast<std::size_t>(written);
  }
  return 0;
}

int read_all(int fd, void* data, std::size_t length) {
  char* cursor = static_cast<char*>(data);
  while (length > 0) {
    ssize_t got = ::read(fd, cursor, length);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -errno;
    if (got == 0) return -EBADMSG;  // the sidecar is shorter than its header says
    cursor += got;
    length -= static_cast<std::size_t>(got);
  }
  return 0;
}

}  // namespace

std::uint32_t crc32c(const std::byte* data, std::int64_t length_bytes) noexcept {
  // The sidecar format stores ISA-L's value before the final inversion.
  STRATA_ASSERT(length_bytes >= 0);
  return ~aio::crc32c({data, static_cast<std::size_t>(length_bytes)});
}

void ChecksumTable::grow(std::int64_t size_bytes) {
  auto sectors = static_cast<std::size_t>((size_bytes + sector_bytes - 1) / sector_bytes);
  {
    std::shared_lock lock(mutex_);
    if (entries_.size() >= sectors) return;
  }
  std::unique_lock lock(mutex_);
  if (entries_.size() < sectors) entries_.resize(sectors, 0);
}

void ChecksumTable::record(std::int64_t offset, const std::byte* data, std::int64_t length_bytes) {
  STRATA_ASSERT(offset % sector_bytes == 0);
  std::shared_lock lock(mutex_);
  auto first = static_cast<std::size_t>(offset / sector_bytes);
  for (std::int64_t done = 0; done < length_bytes; done += sector_bytes) {
    std::size_t sector = first + static_cast<std::size_t>(done / sector_bytes);
    STRATA_ASSERT(sector < entries_.size());  // grow() ran at submit
    std::int64_t length = std::min(sector_bytes, length_bytes - done);
    entries_[sector] = recorded_bit | crc32c(data + done, length);
  }
  dirty_.store(true, std::memory_order_relaxed);
}

std::optional<ChecksumTable::Mismatch> ChecksumTable::verify(std::int64_t offset,
                                                             const std::byte* data,
                                                             std::int64_t length_bytes) const {
  STRATA_ASSERT(offset % sector_bytes == 0);
  std::shared_lock lock(mutex_);
  auto first = static_cast<std::size_t>(offset / sector_bytes);
  for (std::int64_t done = 0; done < length_bytes; done += sector_bytes) {
    std::size_t sector = first + static_cast<std::size_t>(done / sector_bytes);
    std::int64_t length = std::min(sector_bytes, length_bytes - done);
    std::uint32_t actual = crc32c(data + done, length);
    std::uint64_t entry = sector < entries_.size() ? entries_[sector] : 0;
    bool recorded = (entry & recorded_bit) != 0;
    auto expected = static_cast<std::uint32_t>(entry);
    if (!recorded || expected != actual) return Mismatch{offset + done, expected, actual, recorded};
  }
  return std::nullopt;
}

int ChecksumTable::save(const std::filesystem::path& sidecar, std::int64_t data_size_bytes) {
  std::shared_lock lock(mutex_);
  auto sectors = static_cast<std::size_t>((data_size_bytes + sector_bytes - 1) / sector_bytes);
  std::vector<std::uint64_t> entries(sectors, 0);
  std::copy_n(entries_.begin(), std::min(sectors, entries_.size()), entries.begin());
  lock.unlock();

  SidecarHeader header{};
  std::memcpy(header.magic, sidecar_magic, sizeof(header.magic));
  header.sector_bytes = sector_bytes;
  header.data_size_bytes = static_cast<std::uint64_t>(data_size_bytes);
  header.sector_count = sectors;
  header.entries_crc = crc32c(reinterpret_cast<const std::byte*>(entries.data()),
                              static_cast<std::int64_t>(sectors * sizeof(std::uint64_t)));
  std::filesystem::path temporary = sidecar;
  temporary += ".tmp";
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -errno;
  int result = write_all(fd, &header, sizeof(header));
  if (result == 0) result = write_all(fd, entries.data(), sectors * sizeof(std::uint64_t));
  if (result == 0 && ::fsync(fd) != 0) result = -errno;
  ::close(fd);
  if (result == 0 && ::rename(temporary.c_str(), sidecar.c_str()) != 0) result = -errno;
  if (result != 0) {
    ::unlink(temporary.c_str());
    return result;
  }
  dirty_.store(false, std::memory_order_relaxed);
  return 0;
}

int ChecksumTable::load(const std::filesystem::path& sidecar, std::int64_t data_size_bytes) {
  int fd = ::open(sidecar.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -errno;
  SidecarHeader header{};
  int result = read_all(fd, &header, sizeof(header));
  if (result == 0 &&
      (std::memcmp(header.magic, sidecar_magic, sizeof(header.magic)) != 0 ||
       header.sector_bytes != sector_bytes || header.sector_count > (std::uint64_t{1} << 36))) {
    result = -EBADMSG;
  }
  if (result == 0 && header.data_size_bytes != static_cast<std::uint64_t>(data_size_bytes)) {
    result = -ESTALE;
  }
  std::vector<std::uint64_t> entries;
  if (result == 0) {
    entries.resize(static_cast<std::size_t>(header.sector_count));
    result = read_all(fd, entries.data(), entries.size() * sizeof(std::uint64_t));
  }
  ::close(fd);
  if (result == 0 && crc32c(reinterpret_cast<const std::byte*>(entries.data()),
                            static_cast<std::int64_t>(entries.size() * sizeof(std::uint64_t))) !=
                         header.entries_crc) {
    result = -EBADMSG;
  }
  if (result != 0) return result;
  std::unique_lock lock(mutex_);
  entries_ = std::move(entries);
  dirty_.store(false, std::memory_order_relaxed);
  return 0;
}

}  // namespace strata::aio::detail
