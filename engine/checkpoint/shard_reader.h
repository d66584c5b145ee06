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

// Reads a checkpoint's states by parameter name and offset, whatever layout wrote them: a
// partition of any world size and stage asks for its pieces and gets them from whichever
// files hold them. Files are mapped (SafetensorsFile), so memory holds what is being copied.
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

  // Checks the CRC32C of every file holding a state of `pieces` (all files when `pieces` is
  // empty); throws UserError naming the first file that differs. Returns the bytes checked.
  std::int64_t verify(std::span<const Piece> pieces = {}) const;

  // Elements [param_offset, param_offset + out.size()) of `tensor` in state `state`. Throws
  // UserError naming the checkpoint, the tensor and the elements no file holds.
  void read(const std::string& state, const std::string& tensor, std::int64_t param_offset,
            std::span<float> out) const;

 private:
  struct Source {
    std::size_t file = 0;  // index into files_ and manifest_.files
    const TensorEntry* entry = nullptr;
    std::int64_t param_offset = 0;
    std::int64_t numel = 0;
  };
  void index_file(std::size_t file);
  const std::vector<Source>* sources(const std::string& state, const std::string& tensor) const;
  void verify_file(std::size_t file) const;

  std::filesystem::path path_;
  Manifest manifest_;
  std::vector<SafetensorsFile> files_;
  std::map<std::pair<std::string, std::string>, std::vector<Source>> index_;  // (state, tensor)
};

}  // namespace strata::engine::checkpoint
