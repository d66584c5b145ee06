#include "models/hf/pretrained_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "base/assert.h"
#include "base/error.h"

namespace strata::models {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// The prefix this folder's names carry: the first of `naming.prefixes` under which the first
// declared parameter is found.
std::string find_prefix(const HfWeights& weights, const HfNaming& naming,
                        const std::string& first) {
  for (const std::string& prefix : naming.prefixes)
    if (weights.find(prefix + first) != nullptr) return prefix;
  return naming.prefixes.front();
}

}  // namespace

PretrainedWeights::PretrainedWeights(HfWeights weights, const std::vector<engine::ParamSpec>& specs,
                                     const HfNaming& naming)
    : weights_(std::move(weights)) {
  STRATA_ASSERT(!specs.empty());
  const std::string folder = weights_.folder().string();
  const std::string prefix = find_prefix(weights_, naming, naming.name(specs.front().name)->name);
  std::set<std::string> used;
  for (const engine::ParamSpec& spec : specs) {
    const std::optional<HfName> named = naming.name(spec.name);
    STRATA_ASSERT(named.has_value());  // every declared parameter has an HF name
    const HfName& hf = *named;
    const HfWeights::Tensor* tensor = weights_.find(prefix + hf.name);
    if (tensor == nullptr) {
      throw UserError(fmt::format("{}: no tensor \"{}\" ({} parameter {})", folder,
                                  prefix + hf.name, naming.architecture, spec.name),
                      fmt::format("give the folder of a complete {} model whose config.json "
                                  "matches its weights",
                                  naming.architecture),
                      2);
    }
    HfWeights::check_float(*tensor);
    std::vector<std::int64_t> expected = spec.shape;
    if (spec.unpadded_rows > 0) expected.front() = spec.unpadded_rows;
    STRATA_ASSERT(!(hf.transposed && spec.unpadded_rows > 0));  // tables are stored as declared
    if (hf.transposed) std::swap(expected[0], expected[1]);
    if (tensor->entry->shape != expected) {
      throw UserError(fmt::format("{}: tensor \"{}\" has shape {}, but config.json makes it {}",
                                  tensor->file->path().string(), tensor->name,
                                  shape_text(tensor->entry->shape), shape_text(expected)),
                      "give the config.json that came with these weights", 2);
    }
    used.insert(tensor->name);
    const std::int64_t cols = spec.shape.size() == 2 ? spec.shape[1] : spec.numel();
    sources_.push_back({tensor, hf.transposed, spec.numel() / cols, cols, spec.unpadded_numel()});
  }
  for (const auto& [name, tensor] : weights_.tensors()) {
    if (used.contains(name) || naming.is_buffer(name)) continue;
    throw UserError(fmt::format("{}: tensor \"{}\" is not a parameter of {} as config.json "
                                "describes it",
                                tensor.file->path().string(), name, naming.architecture),
                    fmt::format("give the folder of a plain {} causal LM with its own config.json",
                                naming.architecture),
                    2);
  }
}

void PretrainedWeights::read(std::size_t tensor_index, std::int64_t first_element,
                             std::span<float> out) const {
  STRATA_ASSERT(tensor_index < sources_.size());
  const Source& source = sources_[tensor_index];
  if (!source.transposed) {
    // values[i] is element first_element + i: those from `held` on are padded rows.
    const auto held = static_cast<std::size_t>(std::clamp<std::int64_t>(
        source.unpadded_numel - first_element, 0, static_cast<std::int64_t>(out.size())));
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(held), out.end(), 0.0f);
    if (held > 0) HfWeights::read(*source.tensor, first_element, out.first(held));
    return;
  }
  // strata's element (r, c) of [rows, cols] is HF's (c, r) of [cols, rows]: walk the range row
  // by row, each a column of HF's matrix read with a stride.
  std::int64_t element = first_element;
  std::size_t done = 0;
  while (done < out.size()) {
    const std::int64_t r = element / source.cols;
    const std::int64_t c = element % source.cols;
    const std::int64_t count =
        std::min<std::int64_t>(source.cols - c, static_cast<std::int64_t>(out.size() - done));
    HfWeights::read_strided(*source.tensor, c * source.rows + r, source.rows,
                            out.subspan(done, static_cast<std::size_t>(count)));
    done += static_cast<std::size_t>(count);
    element += count;
  }
}

}  // namespace strata::models
