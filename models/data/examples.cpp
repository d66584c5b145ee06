#include "models/data/examples.h"

#include <algorithm>

#include "base/assert.h"
#include "models/data/loss_mask.h"

namespace strata::models {
namespace {

// [begin, end) of example `e` of `starts` in a split of `size` tokens.
std::pair<std::size_t, std::size_t> example_range(std::span<const std::size_t> starts,
                                                  std::size_t e, std::size_t size) {
  return {starts[e], e + 1 < starts.size() ? starts[e + 1] : size};
}

bool leaves_some_out(TokenView split, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    if ((split.mask_at(i) & kInLoss) == 0) return true;
  }
  return false;
}

void append_range(TokenView split, std::size_t begin, std::size_t end,
                  std::vector<std::uint32_t>& ids, std::vector<std::uint8_t>& mask) {
  for (std::size_t i = begin; i < end; ++i) {
    ids.push_back(split[i]);
    mask.push_back(split.mask_at(i));
  }
}

}  // namespace

std::vector<std::size_t> example_starts(TokenView split) {
  std::vector<std::size_t> starts;
  if (!split.has_mask()) return starts;
  for (std::size_t i = 0; i < split.size(); ++i) {
    if ((split.mask_at(i) & kExampleStart) != 0) starts.push_back(i);
  }
  return starts;
}

CutExamples cut_long_examples(TokenView split, std::size_t window) {
  CutExamples result;
  result.tokens = split;
  // Text alone (pretraining data, its cache's mask all in the loss) has no fine-tuning example:
  // one pass over the mask, not an index of every document.
  if (!leaves_tokens_out(split.mask())) return result;
  const std::vector<std::size_t> starts = example_starts(split);
  std::vector<bool> cut(starts.size(), false);
  for (std::size_t e = 0; e < starts.size(); ++e) {
    const auto [begin, end] = example_range(starts, e, split.size());
    if (!leaves_some_out(split, begin, end)) continue;
    ++result.examples;
    cut[e] = end - begin > window;
    result.cut += cut[e] ? 1 : 0;
  }
  if (result.cut == 0) return result;
  auto ids = std::make_shared<std::vector<std::uint32_t>>();
  auto mask = std::make_shared<std::vector<std::uint8_t>>();
  append_range(split, 0, starts.empty() ? split.size() : starts.front(), *ids, *mask);
  for (std::size_t e = 0; e < starts.size(); ++e) {
    const auto [begin, end] = example_range(starts, e, split.size());
    append_range(split, begin, cut[e] ? begin + window : end, *ids, *mask);
  }
  result.tokens = TokenView(*ids).with_mask(*mask);
  result.ids = std::move(ids);
  result.mask = std::move(mask);
  return result;
}

void fill_example_rows(TokenView split, std::span<const std::size_t> starts,
                       std::span<const std::size_t> examples, int seq_len,
                       std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  const auto row_tokens = static_cast<std::size_t>(seq_len);
  STRATA_ASSERT(inputs.size() == examples.size() * row_tokens && targets.size() == inputs.size());
  std::fill(inputs.begin(), inputs.end(), 0);
  std::fill(targets.begin(), targets.end(), kIgnoredTarget);
  for (std::size_t row = 0; row < examples.size(); ++row) {
    const auto [begin, end] = example_range(starts, examples[row], split.size());
    // An example of n tokens gives n - 1 predictions; a window holds seq_len of them.
    const std::size_t predictions = std::min(end - begin, row_tokens + 1) - 1;
    split.copy(begin, inputs.subspan(row * row_tokens, predictions));
    split.copy_targets(begin + 1, targets.subspan(row * row_tokens, predictions));
  }
}

}  // namespace strata::models
