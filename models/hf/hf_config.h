#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace strata::models {

// The rotary embedding's settings: rope_theta and rope_scaling (or the newer rope_parameters).
struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";  // "default" or "llama3"
  // llama3 (transformers' _compute_llama3_parameters):
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_positions = 8192;
};

// A Hugging Face model's config.json, as far as strata builds the model from it. Each model_type
// is read with transformers' key names and defaults; a key whose value strata cannot honour is
// refused, never ignored.
struct HfConfig {
  std::filesystem::path path;  // the config.json read
  std::string model_type;      // gpt2, llama, mistral, qwen2
  std::int64_t n_layer = 0;
  std::int64_t n_head = 0;
  std::int64_t n_kv_head = 0;  // num_key_value_heads (= n_head for GPT-2)
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;  // intermediate_size (4 d_model for GPT-2)
  std::int64_t vocab = 0;
  std::int64_t max_positions = 0;  // n_positions / max_position_embeddings
  double norm_eps = 1e-5;          // layer_norm_epsilon / rms_norm_eps
  bool tie_word_embeddings = true;
  bool qkv_bias = false;  // Qwen2
  // Mistral's (and Qwen2's, when used) attention window; 0 = none. strata computes full causal
  // attention, which is the same while seq_len is at most the window.
  std::int64_t sliding_window = 0;
  RopeConfig rope;

  bool is_gpt2() const { return model_type == "gpt2"; }
};

// Reads `path` (a config.json). Throws UserError naming the file, the key and the fix when it is
// missing or not JSON, names a model_type strata does not build, or sets a key to a value strata
// cannot honour (GPT-2's layer_norm_epsilon other than 1e-5, an activation other than the
// architecture's, a rope_scaling type other than llama3, a sliding window shorter than the
// context, ...).
HfConfig read_hf_config(const std::filesystem::path& path);

}  // namespace strata::models
