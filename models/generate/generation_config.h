#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "models/generate/sampling.h"

namespace strata::models::generate {

// How a model generates unless told otherwise: a Hugging Face folder's generation_config.json,
// read as transformers' GenerationConfig reads it. Without the file, or for a key it leaves out,
// transformers' defaults: greedy (do_sample false), and when sampling is asked for, temperature
// 1, top_k 50, top_p 1, no min_p.
struct GenerationDefaults {
  SamplingOptions sampling{.sample = false, .temperature = 1.0, .top_k = 50};
  std::vector<std::int32_t> eos_token_ids;     // eos_token_id: a number or a list; empty: none
  std::optional<std::int64_t> max_new_tokens;  // none: the caller's default
};

// Reads `folder`/generation_config.json. When the folder has none, the defaults, with the end
// tokens of its config.json's eos_token_id as transformers takes them (from_model_config). Throws
// UserError naming the file, the key and the fix for a file that is not JSON or a value
// transformers would refuse (a temperature that is not positive, top_p outside (0, 1], a negative
// top_k, min_p outside [0, 1], an eos_token_id that is not a token id).
GenerationDefaults read_generation_config(const std::filesystem::path& folder);

}  // namespace strata::models::generate
