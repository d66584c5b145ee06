#pragma once

#include <cstdint>
#include <filesystem>

#include "models/gpt/gpt.h"
#include "models/hf/hf_config.h"

namespace strata::models {

// The built-in GPT's shape for a Hugging Face GPT-2 config: its layers, heads, width, vocabulary
// and all n_positions rows of the position embedding, trained at `seq_len` (at most n_positions)
// with micro-batches of `batch` sequences.
GptShape gpt_shape(const HfConfig& config, std::int64_t seq_len, std::int64_t batch);

// Starts `gpt` from the weights in `folder` (model.safetensors or its shards), which must match
// the GPT's shape: every tensor found, shaped and typed as declared (UserError naming the file,
// the tensor and the fix otherwise). The files stay mapped; the engine reads them range by range
// into each tier as it starts.
void load_pretrained(Gpt& gpt, const std::filesystem::path& folder);

}  // namespace strata::models
