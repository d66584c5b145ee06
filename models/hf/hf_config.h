#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace strata::models {

// A Hugging Face model's config.json, as far as strata builds the model from it. Each
// model_type's keys are read with transformers' names and defaults; a key whose value strata
// cannot honour is refused, never ignored.
struct HfConfig {
  std::filesystem::path path;  // the config.json read
  std::string model_type;      // "gpt2"
  std::int64_t n_layer = 0;
  std::int64_t n_head = 0;
  std::int64_t d_model = 0;
  std::int64_t vocab = 0;
  std::int64_t max_positions = 0;  // n_positions: rows of GPT-2's position embedding
  bool tie_word_embeddings = true;
};

// Reads `path` (a config.json). Throws UserError naming the file, the key and the fix when it is
// missing or not JSON, names a model_type strata does not build, or sets a key to a value strata
// cannot honour (GPT-2's layer_norm_epsilon other than 1e-5, an activation other than gelu_new,
// an untied head, ...).
HfConfig read_hf_config(const std::filesystem::path& path);

}  // namespace strata::models
