// Hugging Face's names for strata's parameters, per architecture.
#include "models/hf/hf_names.h"

#include <regex>
#include <utility>

namespace strata::models {
namespace {

std::optional<HfName> gpt2_name(const std::string& strata_name) {
  // Block tensors: h.N.<strata> -> h.N.<hf>; the rest by name.
  static const std::vector<std::pair<std::string, HfName>> block = {
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
  if (strata_name == "wte") return HfName{"wte.weight", false};
  if (strata_name == "wpe") return HfName{"wpe.weight", false};
  if (strata_name == "lnf.weight") return HfName{"ln_f.weight", false};
  if (strata_name == "lnf.bias") return HfName{"ln_f.bias", false};
  const std::size_t dot = strata_name.find('.', 2);
  if (!strata_name.starts_with("h.") || dot == std::string::npos) return std::nullopt;
  const std::string layer = strata_name.substr(0, dot + 1);  // "h.N."
  const std::string rest = strata_name.substr(dot + 1);
  for (const auto& [ours, theirs] : block)
    if (rest == ours) return HfName{layer + theirs.name, theirs.transposed};
  return std::nullopt;
}

bool gpt2_buffer(const std::string& name) {
  static const std::regex buffer(
      R"((transformer\.)?h\.\d+\.attn\.(bias|masked_bias)|lm_head\.weight)");
  return std::regex_match(name, buffer);
}

std::optional<HfName> llama_name(const std::string& strata_name) {
  static const std::regex ours(
      R"(model\.embed_tokens\.weight|model\.norm\.weight|lm_head\.weight|)"
      R"(model\.layers\.\d+\.(input_layernorm|post_attention_layernorm)\.weight|)"
      R"(model\.layers\.\d+\.self_attn\.(q|k|v)_proj\.(weight|bias)|)"
      R"(model\.layers\.\d+\.self_attn\.o_proj\.weight|)"
      R"(model\.layers\.\d+\.mlp\.(gate|up|down)_proj\.weight)");
  if (!std::regex_match(strata_name, ours)) return std::nullopt;
  return HfName{strata_name, false};
}

// Older Llama files carry each layer's rotary cache; a tied model's file may carry lm_head.
bool llama_buffer(const std::string& name) {
  static const std::regex buffer(
      R"(model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq|lm_head\.weight)");
  return std::regex_match(name, buffer);
}

}  // namespace

const HfNaming& gpt2_naming() {
  static const HfNaming naming{"GPT-2", &gpt2_name, {"transformer.", ""}, &gpt2_buffer};
  return naming;
}

const HfNaming& llama_naming() {
  static const HfNaming naming{"Llama", &llama_name, {""}, &llama_buffer};
  return naming;
}

}  // namespace strata::models
