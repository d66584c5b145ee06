#pragma once

// Token files for the data tests, written by each format's letter into the temporary directory.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"

namespace strata::models::testing {

// A file `name`-<the test>-<the run's seed>`extension` in the temporary directory holding
// `bytes`: the test's name keeps tests that ctest runs at once apart.
inline std::filesystem::path temp_file(const std::string& name, const std::string& bytes,
                                       const std::string& extension = "") {
  const ::testing::UnitTest& run = *::testing::UnitTest::GetInstance();
  auto path =
      std::filesystem::temp_directory_path() / (name + "-" + run.current_test_info()->name() + "-" +
                                                std::to_string(run.random_seed()) + extension);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

template <typename Token>
inline std::string raw_bytes(const std::vector<Token>& tokens) {
  return std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(Token));
}

template <typename Token = std::uint16_t>
inline std::string llmc_file(const std::vector<Token>& tokens, std::int32_t magic = 20240520,
                             std::int32_t version = 1) {
  std::int32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(tokens.size());
  return std::string(reinterpret_cast<const char*>(header), sizeof(header)) + raw_bytes(tokens);
}

// PREFIX.bin and PREFIX.idx as Megatron-LM's _IndexWriter lays them out: "MMIDIDX\0\0", version
// 1 (u64), the dtype code (u8), sequence and document counts (u64), the sizes (i32), pointers
// (i64) and document indices (i64); the ids are `Token`s.
template <typename Token = std::uint16_t>
inline void write_megatron(const std::filesystem::path& prefix,
                           const std::vector<std::vector<Token>>& documents, std::uint8_t code) {
  std::ofstream bin(prefix.string() + ".bin", std::ios::binary | std::ios::trunc);
  std::ofstream idx(prefix.string() + ".idx", std::ios::binary | std::ios::trunc);
  auto put = [&](const auto& value) {
    idx.write(reinterpret_cast<const char*>(&value), sizeof(value));
  };
  idx.write("MMIDIDX\0\0", 9);
  put(std::uint64_t{1});
  put(code);
  put(static_cast<std::uint64_t>(documents.size()));
  put(static_cast<std::uint64_t>(documents.size() + 1));
  for (const auto& document : documents)
    put(static_cast<std::int32_t>(document.size()));
  std::int64_t pointer = 0;
  for (const auto& document : documents) {
    put(pointer);
    pointer += static_cast<std::int64_t>(document.size() * sizeof(Token));
  }
  for (std::size_t d = 0; d <= documents.size(); ++d)
    put(static_cast<std::int64_t>(d));
  for (const auto& document : documents)
    bin << raw_bytes(document);
}

// A temporary folder per test (named `name`-<the test>-<the run's seed>), removed at the end.
struct TempFolder {
  std::filesystem::path path;
  explicit TempFolder(const std::string& name) : path(temp_file(name, "", "")) {
    std::filesystem::remove(path);
    std::filesystem::create_directories(path);
  }
  ~TempFolder() { std::filesystem::remove_all(path); }
  std::filesystem::path write(const std::string& file, const std::string& bytes) const {
    std::ofstream(path / file, std::ios::binary) << bytes;
    return path / file;
  }
};

// What `work` is refused with, and its fix; "no refusal" when it throws no UserError.
inline std::string refusal_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const UserError& error) {
    return std::string(error.what()) + "\nfix: " + error.fix();
  }
  return "no refusal";
}

}  // namespace strata::models::testing
