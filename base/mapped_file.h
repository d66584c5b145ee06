#pragma once

#include <cstddef>
#include <filesystem>
#include <span>

namespace strata::base {

// A whole file mapped read-only (MAP_PRIVATE): its bytes are paged in as they are read and are
// page cache, not the process's own memory, so a file of any size costs only the pages touched.
// Move-only; spans from bytes() live as long as the object. An empty file maps to an empty span.
class MappedFile {
 public:
  // Throws std::system_error carrying errno, its what() starting "cannot be opened" or "cannot be
  // mapped": the caller names the file and the fix, which depend on what the file is for.
  static MappedFile open(const std::filesystem::path& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace strata::base
