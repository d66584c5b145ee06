#include "engine/zero/flat_layout.h"

#include <algorithm>

#include "base/assert.h"
#include "base/round_up.h"

namespace strata::engine::zero {
FlatLayout::FlatLayout(const std::vector<std::vector<ParamSpec>>& modules, int world_size,
                       std::int64_t shard_alignment_elements)
    : world_size_(world_size) {
  STRATA_ASSERT(world_size >= 1);
  STRATA_ASSERT(shard_alignment_elements >= 1);
  for (std::size_t m = 0; m < modules.size(); ++m) {
    first_tensor_.push_back(tensors_.size());
    std::int64_t offset = 0;
    for (const ParamSpec& spec : modules[m]) {
      STRATA_ASSERT(spec.numel() > 0);
      const bool first_of_its_name = by_name_.emplace(spec.name, tensors_.size()).second;
      STRATA_ASSERT(first_of_its_name);
      offset = base::round_up(offset, kTensorAlignment);
      tensors_.push_back(
          {spec.name, spec.shape, static_cast<int>(m), offset, spec.numel(), spec.unpadded_rows});
      offset += spec.numel();
      parameter_count_ += spec.numel();
    }
    ModuleSlice slice;
    slice.numel = offset;
    // An empty module still gets one aligned shard so that every module has a buffer.
    slice.shard_numel =
        base::round_up(std::max<std::int64_t>(1, (offset + world_size - 1) / world_size),
                       shard_alignment_elements);
    slice.padded_numel = slice.shard_numel * world_size;
    slice.partition_offset = partition_numel_;
    partition_numel_ += slice.shard_numel;
    modules_.push_back(slice);
  }
  first_tensor_.push_back(tensors_.size());
}

const ModuleSlice& FlatLayout::module(int index) const {
  STRATA_ASSERT(index >= 0 && index < module_count());
  return modules_[index];
}

std::span<const TensorSlot> FlatLayout::tensors(int module) const {
  STRATA_ASSERT(module >= 0 && module < module_count());
  return std::span<const TensorSlot>(tensors_).subspan(
      first_tensor_[module], first_tensor_[module + 1] - first_tensor_[module]);
}

const TensorSlot* FlatLayout::find(std::string_view name) const {
  const auto found = by_name_.find(name);
  return found == by_name_.end() ? nullptr : &tensors_[found->second];
}

std::vector<int> FlatLayout::modules_in(Range range) const {
  std::vector<int> found;
  for (int m = 0; m < module_count(); ++m) {
    const ModuleSlice& slice = modules_[m];
    std::int64_t begin = slice.partition_offset;
    std::int64_t end = begin + slice.shard_numel;
    if (begin < range.end && range.begin < end) found.push_back(m);
  }
  return found;
}

std::vector<Range> make_sub_groups(std::int64_t partition_numel, std::int64_t sub_group_size,
                                   std::int64_t alignment) {
  STRATA_ASSERT(partition_numel >= 0);
  STRATA_ASSERT(sub_group_size >= 1);
  STRATA_ASSERT(alignment >= 1);
  std::int64_t step = std::max(alignment, sub_group_size / alignment * alignment);
  std::vector<Range> groups;
  for (std::int64_t begin = 0; begin < partition_numel; begin += step) {
    groups.push_back({begin, std::min(partition_numel, begin + step)});
  }
  return groups;
}

std::vector<Range> make_sub_groups(const FlatLayout& layout, std::int64_t sub_group_size) {
  STRATA_ASSERT(sub_group_size >= 0);
  if (sub_group_size > 0) return make_sub_groups(layout.partition_numel(), sub_group_size);
  std::vector<Range> groups;
  for (int m = 0; m < layout.module_count(); ++m) {
    const ModuleSlice& slice = layout.module(m);
    if (slice.shard_numel == 0) continue;
    groups.push_back({slice.partition_offset, slice.partition_offset + slice.shard_numel});
  }
  return groups;
}

}  // namespace strata::engine::zero
