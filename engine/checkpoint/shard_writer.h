#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "aio/engine.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/shard_pieces.h"

namespace strata::engine::checkpoint {

// The file one shard rank writes for one state: `master.rank00001.safetensors`.
std::string state_file_name(const std::string& state, int shard_rank);

// Writes one rank's share of the optimizer states while its partition streams past in order:
// one safetensors file per state, holding each piece of the partition as a 1-D F32 tensor under
// the parameter's name, with "offset:<name>" in the file's metadata giving where the piece
// starts in the flattened parameter (so Python's `safetensors` reads them as they are).
class ShardWriter {
 public:
  ShardWriter(aio::Engine& io, const std::filesystem::path& directory, std::vector<Piece> pieces,
              int shard_rank, int shard_ranks, std::vector<std::string> states);

  // Elements [range.begin, range.end) of the partition for each state, values[i] for states[i].
  // Ranges come in order and cover the partition.
  void write(zero::Range range, std::span<const std::span<const float>> values);
  // Finishes every file (durable) and returns their manifest entries.
  std::vector<ManifestFile> finish();

 private:
  std::vector<Piece> pieces_;
  PieceCursor cursor_;
  int shard_rank_;
  std::vector<std::string> states_;
  std::vector<std::unique_ptr<SafetensorsWriter>> writers_;  // per state
};

}  // namespace strata::engine::checkpoint
