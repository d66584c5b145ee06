#include "engine/checkpoint/shard_pieces.h"

#include <algorithm>

#include "base/assert.h"

namespace strata::engine::checkpoint {

std::vector<Piece> shard_pieces(const zero::FlatLayout& layout, int shard_rank) {
  STRATA_ASSERT(shard_rank >= 0 && shard_rank < layout.world_size());
  std::vector<Piece> pieces;
  for (int m = 0; m < layout.module_count(); ++m) {
    const zero::ModuleSlice& slice = layout.module(m);
    const std::int64_t shard_begin = shard_rank * slice.shard_numel;
    const std::int64_t shard_end = shard_begin + slice.shard_numel;
    for (const zero::TensorSlot& slot : layout.tensors(m)) {
      const std::int64_t begin = std::max(slot.offset, shard_begin);
      const std::int64_t end = std::min(slot.offset + slot.numel, shard_end);
      if (begin >= end) continue;
      pieces.push_back(
          {&slot, begin - slot.offset, end - begin, slice.partition_offset + begin - shard_begin});
    }
  }
  return pieces;
}

void PieceCursor::for_each_in(zero::Range range, const Visit& visit) {
  while (next_ < pieces_.size() &&
         pieces_[next_].partition_offset + pieces_[next_].numel <= range.begin)
    ++next_;
  for (std::size_t i = next_; i < pieces_.size(); ++i) {
    const Piece& piece = pieces_[i];
    if (piece.partition_offset >= range.end) break;
    const std::int64_t begin = std::max(piece.partition_offset, range.begin);
    const std::int64_t end = std::min(piece.partition_offset + piece.numel, range.end);
    STRATA_ASSERT(begin < end);
    visit(piece, begin, end);
  }
}

}  // namespace strata::engine::checkpoint
