#pragma once

#include <optional>
#include <string>
#include <vector>

namespace strata::models {

// Where a Hugging Face checkpoint keeps one of strata's parameters: its name there and whether
// it is stored transposed (GPT-2's Conv1D weights are [in, out]; strata's linear weights, like
// nn.Linear's, are [out, in]).
struct HfName {
  std::string name;
  bool transposed = false;
};

// How an architecture's parameters are named in its Hugging Face files.
struct HfNaming {
  const char* architecture;  // for messages: "GPT-2", "Llama"
  // strata's name -> HF's (without any of `prefixes`); nullopt for a name strata does not declare
  // for this architecture.
  std::optional<HfName> (*name)(const std::string& strata_name);
  // Tried in order when a name is looked up; the first that finds the first tensor is kept.
  std::vector<std::string> prefixes;
  // Tensors a file may hold that are not parameters (attention masks, rotary caches, a tied
  // head's copy): passed over when loading.
  bool (*is_buffer)(const std::string& hf_name);
};

// GPT2LMHeadModel's state dict, names with "transformer." or (older files) without.
const HfNaming& gpt2_naming();
// LlamaForCausalLM's (also Mistral's and Qwen2's): strata's Llama declares HF's own names.
const HfNaming& llama_naming();

}  // namespace strata::models
