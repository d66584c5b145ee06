#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>

#include "aio/aligned_buffer.h"
#include "aio/engine.h"

namespace strata::aio::testing {

// A fresh directory under `parent` (the system temp folder, on a real disk here), removed with
// everything in it when the test ends.
class TempDir {
 public:
  explicit TempDir(const std::filesystem::path& parent = std::filesystem::temp_directory_path()) {
    std::string pattern = (parent / "strata-aio-test-XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed under " + parent.string());
    path_ = made;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Self-describing data (liburing's test/file-verify.c): each 8-byte word holds its own file
// offset mixed with a tag, so a misplaced or stale block is caught by its content alone.
inline std::uint64_t word_at(std::int64_t file_offset, std::uint64_t tag) {
  return static_cast<std::uint64_t>(file_offset) * 0x9E3779B97F4A7C15ull ^ tag;
}

inline void fill_pattern(std::span<std::byte> buffer, std::int64_t file_offset, std::uint64_t tag) {
  for (std::size_t i = 0; i + 8 <= buffer.size(); i += 8) {
    std::uint64_t word = word_at(file_offset + static_cast<std::int64_t>(i), tag);
    std::memcpy(buffer.data() + i, &word, 8);
  }
}

// The file offset of the first word that does not match, or -1.
inline std::int64_t first_mismatch(std::span<const std::byte> buffer, std::int64_t file_offset,
                                   std::uint64_t tag) {
  for (std::size_t i = 0; i + 8 <= buffer.size(); i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, buffer.data() + i, 8);
    if (word != word_at(file_offset + static_cast<std::int64_t>(i), tag)) {
      return file_offset + static_cast<std::int64_t>(i);
    }
  }
  return -1;
}

inline EngineOptions small_options(Backend backend = Backend::io_uring) {
  EngineOptions options;
  options.block_size_bytes = 64 << 10;
  options.queue_depth = 8;
  options.thread_count = 2;
  options.backend = backend;
  return options;
}

// Writes `size_bytes` of pattern `tag` from offset 0 and waits.
inline void write_pattern(Engine& engine, File& file, std::int64_t size_bytes, std::uint64_t tag) {
  AlignedBuffer buffer(size_bytes);
  fill_pattern(buffer.span(), 0, tag);
  engine.wait(engine.submit_write(file, 0, buffer.span()));
}

}  // namespace strata::aio::testing
