// The built-in GPT's parameters by Hugging Face GPT-2's names (GPT2LMHeadModel's state dict).
#include "models/hf/gpt2_weights.h"

#include <fmt/format.h>

#include <regex>
#include <set>

#include "base/assert.h"
#include "base/error.h"

namespace strata::models {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Tensors a GPT-2 file may hold that are not parameters of the model.
bool is_buffer(const std::string& name) {
  static const std::regex buffer(
      R"((transformer\.)?h\.\d+\.attn\.(bias|masked_bias)|lm_head\.weight)");
  return std::regex_match(name, buffer);
}

}  // namespace

std::optional<Gpt2Name> gpt2_name(const std::string& strata_name) {
  // Block tensors: h.N.<strata> -> h.N.<hf>; the rest by name.
  static const std::vector<std::pair<std::string, Gpt2Name>> block = {
      {"ln1.weight", {"ln_1.weight", false}},
      {"ln1.bias", {"ln_1.bias", false}},
      {"attn.qkv.weight", {"attn.c_attn.weight", true}},
      {"attn.qkv.bias", {"attn.c_attn.bias", false}},
      {"attn.proj.weight", {"attn.c_proj.weight", true}},
      {"attn.proj.bias", {"attn.c_proj.bias", false}},
      {"ln2.weight", {"ln_2.weight", false}},
      {"ln2.bias", {"ln_2.bias", false}},
      {"mlp.fc.weight", {"mlp.c_fc.weight", true}},
      {"mlp.fc.bias", {"mlp.c_fc.bias", false}},
      {"mlp.proj.weight", {"mlp.c_proj.weight", true}},
      {"mlp.proj.bias", {"mlp.c_proj.bias", false}}};
  if (strata_name == "wte") return Gpt2Name{"wte.weight", false};
  if (strata_name == "wpe") return Gpt2Name{"wpe.weight", false};
  if (strata_name == "lnf.weight") return Gpt2Name{"ln_f.weight", false};
  if (strata_name == "lnf.bias") return Gpt2Name{"ln_f.bias", false};
  const std::size_t dot = strata_name.find('.', 2);
  if (!strata_name.starts_with("h.") || dot == std::string::npos) return std::nullopt;
  const std::string layer = strata_name.substr(0, dot + 1);  // "h.N."
  const std::string rest = strata_name.substr(dot + 1);
  for (const auto& [ours, theirs] : block)
    if (rest == ours) return Gpt2Name{layer + theirs.name, theirs.transposed};
  return std::nullopt;
}

Gpt2Weights::Gpt2Weights(HfWeights weights, const std::vector<engine::ParamSpec>& specs)
    : weights_(std::move(weights)) {
  const std::string folder = weights_.folder().string();
  const std::string prefix =
      weights_.find("transformer.wte.weight") != nullptr ? "transformer." : "";
  std::set<std::string> used;
  for (const engine::ParamSpec& spec : specs) {
    const std::optional<Gpt2Name> named = gpt2_name(spec.name);
    STRATA_ASSERT(named.has_value());  // every GPT parameter has a GPT-2 name
    const Gpt2Name& hf = *named;
    const HfWeights::Tensor* tensor = weights_.find(prefix + hf.name);
    if (tensor == nullptr) {
      throw UserError(fmt::format("{}: no tensor \"{}\" (GPT-2's {} for strata's {})", folder,
                                  prefix + hf.name, hf.name, spec.name),
                      "give the folder of a complete GPT-2 model, whose config.json matches its "
                      "weights",
                      2);
    }
    HfWeights::check_float(*tensor);
    std::vector<std::int64_t> expected = spec.shape;
    if (hf.transposed) std::swap(expected[0], expected[1]);
    if (tensor->entry->shape != expected) {
      throw UserError(
          fmt::format("{}: tensor \"{}\" has shape {}, but config.json ({}) makes it {}",
                      tensor->file->path().string(), tensor->name, shape_text(tensor->entry->shape),
                      shape_text(spec.shape), shape_text(expected)),
          "give the config.json that came with these weights", 2);
    }
    used.insert(tensor->name);
    const std::int64_t cols = spec.shape.size() == 2 ? spec.shape[1] : spec.numel();
    sources_.push_back({tensor, hf.transposed, spec.numel() / cols, cols});
  }
  for (const auto& [name, tensor] : weights_.tensors()) {
    if (used.contains(name) || is_buffer(name)) continue;
    throw UserError(fmt::format("{}: tensor \"{}\" is not a parameter of GPT-2 as config.json "
                                "describes it",
                                tensor.file->path().string(), name),
                    "give the folder of a plain GPT-2 (GPT2LMHeadModel) with its own config.json",
                    2);
  }
}

void Gpt2Weights::read(std::size_t tensor_index, std::int64_t first_element,
                       std::span<float> out) const {
  STRATA_ASSERT(tensor_index < sources_.size());
  const Source& source = sources_[tensor_index];
  if (!source.transposed) {
    HfWeights::read(*source.tensor, first_element, out);
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
