#include "engine/checkpoint/shard_writer.h"

#include <fmt/format.h>

#include "base/assert.h"

namespace strata::engine::checkpoint {

std::string state_file_name(const std::string& state, int shard_rank) {
  return fmt::format("{}.rank{:05}.safetensors", state, shard_rank);
}

ShardWriter::ShardWriter(aio::Engine& io, const std::filesystem::path& directory,
                         std::vector<Piece> pieces, int shard_rank, int shard_ranks,
                         std::vector<std::string> states)
    : pieces_(std::move(pieces)),
      cursor_(pieces_),
      shard_rank_(shard_rank),
      states_(std::move(states)) {
  std::vector<SafetensorsWriter::Tensor> tensors;
  std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                 {"rank", std::to_string(shard_rank)},
                                                 {"shard_ranks", std::to_string(shard_ranks)}};
  for (const Piece& piece : pieces_) {
    tensors.push_back({piece.tensor->name, Dtype::f32, {piece.numel}});
    metadata["offset:" + piece.tensor->name] = std::to_string(piece.param_offset);
  }
  for (const std::string& state : states_) {
    metadata["state"] = state;
    writers_.push_back(std::make_unique<SafetensorsWriter>(
        io, directory / state_file_name(state, shard_rank), tensors, metadata));
  }
}

void ShardWriter::write(zero::Range range, std::span<const std::span<const float>> values) {
  STRATA_ASSERT(values.size() == writers_.size());
  cursor_.for_each_in(range, [&](const Piece&, std::int64_t begin, std::int64_t end) {
    for (std::size_t s = 0; s < writers_.size(); ++s) {
      std::span<const float> part = values[s].subspan(static_cast<std::size_t>(begin - range.begin),
                                                      static_cast<std::size_t>(end - begin));
      writers_[s]->append(std::as_bytes(part));
    }
  });
}

std::vector<ManifestFile> ShardWriter::finish() {
  std::vector<ManifestFile> files;
  for (std::size_t s = 0; s < writers_.size(); ++s) {
    const WrittenFile written = writers_[s]->finish();
    files.push_back({state_file_name(states_[s], shard_rank_), states_[s], shard_rank_,
                     written.bytes, written.crc32c});
  }
  return files;
}

}  // namespace strata::engine::checkpoint
