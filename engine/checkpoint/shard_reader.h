#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/shard_pieces.h"

namespace strata::engine::checkpoint {

// A checkpoint opened for reading: its manifest, and every state file's header checked against
// it and indexed by parameter name and offset, so that a partition of any world size and stage
// finds its pieces in whichever files hold them. The data itself is read by StateStream
// (state_stream.h), through aio, which also checks whole files (verify_files).
class ShardReader {
 public:
  // Reads the manifest and opens every file it lists. Throws UserError naming the file for a
  // missing one, one whose size differs from the manifest's, or one whose tensors do not match
  // it (a state, dtype or offset that is not the manifest's, a piece past its tensor's end).
  explicit ShardReader(std::filesystem::path checkpoint);

  const std::filesystem::path& path() const noexcept { return path_; }
  const Manifest& manifest() const noexcept { return manifest_; }

  // Refuses a checkpoint of another model: names the first tensor missing, extra, or shaped
  // otherwise, with the fix.
  void check_model(std::span<const zero::TensorSlot> tensors) const;

  // A piece of a parameter that one file holds: its entry there and where it starts in the
  // flattened parameter.
  struct Source {
    std::size_t file = 0;  // index into manifest().files and file()
    const TensorEntry* entry = nullptr;
    std::int64_t param_offset = 0;
    std::int64_t numel = 0;
  };
  // The pieces of `tensor` in state `state`, by param_offset; nullptr when no file holds one.
  const std::vector<Source>* sources(const std::string& state, const std::string& tensor) const;
  const SafetensorsFile& file(std::size_t index) const { return files_[index]; }
  std::filesystem::path file_path(std::size_t index) const;

  // Throws UserError naming the file when `crc32c` and `bytes` (what was read of it) are not
  // what the manifest says.
  void check_crc(std::size_t file, std::uint32_t crc32c, std::int64_t bytes) const;
  // Throws UserError with `cause` and the fix for a damaged checkpoint (resume from another).
  [[noreturn]] void refuse_damaged(const std::string& cause) const;

 private:
  void index_file(std::size_t file);

  std::filesystem::path path_;
  Manifest manifest_;
  std::vector<SafetensorsFile> files_;
  std::map<std::pair<std::string, std::string>, std::vector<Source>> index_;  // (state, tensor)
};

}  // namespace strata::engine::checkpoint
