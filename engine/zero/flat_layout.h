#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/by_index.h"
#include "engine/param_spec.h"

namespace strata::engine::zero {

// Where one tensor lives inside its module's flat buffer.
struct TensorSlot {
  std::string name;
  std::vector<std::int64_t> shape;
  int module = 0;
  std::int64_t offset = 0;  // elements from the start of the module's flat buffer
  std::int64_t numel = 0;
  std::int64_t unpadded_rows = 0;  // ParamSpec::unpadded_rows
};

// One module's flat buffer and how it is cut across ranks. Every rank owns the same-sized
// contiguous shard [rank * shard_numel, (rank + 1) * shard_numel); the tail past `numel` is
// padding, kept at zero, so that shards are equal and aligned for O_DIRECT.
struct ModuleSlice {
  std::int64_t numel = 0;         // used elements, tensors and the gaps that align them
  std::int64_t padded_numel = 0;  // shard_numel * world_size
  std::int64_t shard_numel = 0;
  // Where this module's shard starts in a rank's partition: the concatenation of the rank's
  // shards of every module, in module order, which is what the optimizer walks.
  std::int64_t partition_offset = 0;
};

// A contiguous range of a rank's partition, in elements.
struct Range {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
};

// The flat layout of a model's parameters for one world size (ZeRO's "flat buffer" per module,
// as llm.c keeps every tensor in one allocation). Built once; the name index serves checkpoints.
class FlatLayout {
 public:
  // Tensors start on multiples of kTensorAlignment elements (64 bytes of fp32) so kernels see
  // aligned rows; shards are multiples of `shard_alignment_elements` so that every shard of a
  // 2-byte and a 4-byte copy is a whole number of 4 KiB blocks (2048 elements does both).
  static constexpr std::int64_t kTensorAlignment = 16;
  static constexpr std::int64_t kDefaultShardAlignment = 2048;

  FlatLayout(const std::vector<std::vector<ParamSpec>>& modules, int world_size,
             std::int64_t shard_alignment_elements = kDefaultShardAlignment);

  int world_size() const { return world_size_; }
  int module_count() const { return modules_.size(); }
  const ModuleSlice& module(int index) const;
  std::span<const TensorSlot> tensors(int module) const;
  // Every tensor, in module order then declaration order.
  std::span<const TensorSlot> all_tensors() const { return tensors_; }
  // nullptr when no tensor has that name.
  const TensorSlot* find(std::string_view name) const;

  // Elements a rank owns across all modules (the same for every rank).
  std::int64_t partition_numel() const { return partition_numel_; }
  // Parameters the model declares, without padding.
  std::int64_t parameter_count() const { return parameter_count_; }

  // The module shard ranges of the partition that intersect `range`.
  std::vector<int> modules_in(Range range) const;

 private:
  int world_size_;
  base::ByIndex<ModuleSlice> modules_;
  std::vector<TensorSlot> tensors_;
  // Per module its first tensor's index into tensors_, then one past the last tensor's.
  base::ByIndex<std::size_t> first_tensor_;
  // Tensor name -> index into tensors_, looked up by string_view (a transparent hash).
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const noexcept {
      return std::hash<std::string_view>{}(name);
    }
  };
  std::unordered_map<std::string, std::size_t, NameHash, std::equal_to<>> by_name_;
  std::int64_t partition_numel_ = 0;
  std::int64_t parameter_count_ = 0;
};

// Cuts a partition of `partition_numel` elements into sub-groups of about `sub_group_size`
// elements (DeepSpeed's optimizer tiles), each a multiple of `alignment` except possibly the
// last. A sub_group_size larger than the partition gives one sub-group.
std::vector<Range> make_sub_groups(std::int64_t partition_numel, std::int64_t sub_group_size,
                                   std::int64_t alignment = FlatLayout::kDefaultShardAlignment);

// The sub-groups of `layout`'s partition for zero_optimization.sub_group_size: the cut above for
// a size >= 1; for 0, one sub-group per module shard. DeepSpeed's 0 makes every parameter its
// own sub-group; strata partitions module by module, so a module's shard is its smallest unit.
std::vector<Range> make_sub_groups(const FlatLayout& layout, std::int64_t sub_group_size);

}  // namespace strata::engine::zero
