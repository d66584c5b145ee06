#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/zero/flat_layout.h"

namespace strata::engine::checkpoint {

// A run of one parameter that a rank's partition holds: elements [param_offset, param_offset +
// numel) of the flattened tensor sit at [partition_offset, partition_offset + numel) of the
// partition. A checkpoint stores each piece under the tensor's name with its param_offset, so
// any other layout (world size, stage) finds its own pieces in it by name and offset alone.
struct Piece {
  const zero::TensorSlot* tensor = nullptr;  // the layout's; lives as long as the layout
  std::int64_t param_offset = 0;
  std::int64_t numel = 0;
  std::int64_t partition_offset = 0;
};

// The pieces of `shard_rank`'s partition of `layout`, in partition order (padding and the gaps
// that align tensors hold no piece).
std::vector<Piece> shard_pieces(const zero::FlatLayout& layout, int shard_rank);

// Walks pieces against ranges of the partition that come in order (sub-groups, or chunks of a
// partition on the device): for each range, the part of each piece inside it.
class PieceCursor {
 public:
  explicit PieceCursor(std::span<const Piece> pieces) : pieces_(pieces) {}

  // Calls `visit(piece, begin, end)` for every piece overlapping `range`, with [begin, end) the
  // overlap in partition elements. Ranges must not go backwards.
  using Visit = std::function<void(const Piece& piece, std::int64_t begin, std::int64_t end)>;
  void for_each_in(zero::Range range, const Visit& visit);

 private:
  std::span<const Piece> pieces_;
  std::size_t next_ = 0;  // the first piece that may still overlap a later range
};

}  // namespace strata::engine::checkpoint
