#include "engine/zero/flat_layout.h"

#include <gtest/gtest.h>

namespace strata::engine::zero {
namespace {

std::vector<std::vector<ParamSpec>> two_modules() {
  return {
      {{"wte", {50, 8}}, {"wpe", {16, 8}}},
      {{"ln.weight", {8}, ParamInit::ones, 0}, {"fc.weight", {32, 8}}, {"fc.bias", {32}}},
  };
}

TEST(FlatLayout, AlignsTensorsAndCountsParameters) {
  FlatLayout layout(two_modules(), 1, 64);
  EXPECT_EQ(layout.parameter_count(), 50 * 8 + 16 * 8 + 8 + 32 * 8 + 32);
  const TensorSlot* fc = layout.find("fc.weight");
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->module, 1);
  EXPECT_EQ(fc->offset, 16);  // ln.weight's 8 elements, rounded up to 16
  EXPECT_EQ(layout.find("fc.bias")->offset, 16 + 256);
  EXPECT_EQ(layout.find("missing"), nullptr);
  EXPECT_EQ(layout.tensors(0).size(), 2u);
  EXPECT_EQ(layout.all_tensors().size(), 5u);
}

TEST(FlatLayout, ShardsAreEqualAlignedAndCoverTheModule) {
  for (int world : {1, 2, 3, 4, 7}) {
    FlatLayout layout(two_modules(), world, 64);
    std::int64_t partition = 0;
    for (int m = 0; m < layout.module_count(); ++m) {
      const ModuleSlice& slice = layout.module(m);
      EXPECT_EQ(slice.shard_numel % 64, 0) << "world " << world;
      EXPECT_GE(slice.padded_numel, slice.numel);
      EXPECT_LT(slice.padded_numel - slice.numel, 64 * world) << "more padding than needed";
      EXPECT_EQ(slice.partition_offset, partition);
      partition += slice.shard_numel;
    }
    EXPECT_EQ(layout.partition_numel(), partition);
  }
}

TEST(FlatLayout, ModulesInFindsOverlappingShards) {
  FlatLayout layout(two_modules(), 2, 64);
  std::int64_t second = layout.module(1).partition_offset;
  EXPECT_EQ(layout.modules_in({0, 1}), std::vector<int>{0});
  EXPECT_EQ(layout.modules_in({second - 1, second + 1}), (std::vector<int>{0, 1}));
  EXPECT_EQ(layout.modules_in({second, layout.partition_numel()}), std::vector<int>{1});
}

TEST(MakeSubGroups, CoversThePartitionInAlignedPieces) {
  auto groups = make_sub_groups(10'000, 3'000, 1024);
  ASSERT_EQ(groups.size(), 5u);  // 2048-element groups: 3000 rounds down to a multiple of 1024
  EXPECT_EQ(groups[0].size(), 2048);
  EXPECT_EQ(groups.back().end, 10'000);
  for (std::size_t i = 1; i < groups.size(); ++i)
    EXPECT_EQ(groups[i].begin, groups[i - 1].end);
}

TEST(MakeSubGroups, LargeSubGroupGivesOneGroup) {
  auto groups = make_sub_groups(10'000, 1'000'000'000, 2048);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].size(), 10'000);
}

TEST(MakeSubGroups, SubGroupSmallerThanAlignmentUsesTheAlignment) {
  auto groups = make_sub_groups(5000, 10, 2048);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].size(), 2048);
}

}  // namespace
}  // namespace strata::engine::zero
