#pragma once

// Whether a checkpoint holds the model a run builds: the same tensors by name and shape. Judged
// from the manifest alone, so that `strata train --resume` can refuse a checkpoint of another
// model before it builds the engine, and the engine's load refuses it the same way.

#include <filesystem>
#include <span>
#include <string>

#include "engine/checkpoint/manifest.h"

namespace strata::engine::checkpoint {

// The model a checkpoint holds, in words: its Hugging Face architecture and shape (from the
// config.json it was built from) or strata.model's shape keys, and its parameter count; e.g.
// "a llama model (hidden_size 64, num_hidden_layers 2, vocab_size 256; 0.1M parameters)".
std::string describe_model(const Manifest& manifest);

// Refuses, naming `checkpoint`'s manifest, the first tensor of `model` missing from the
// checkpoint, shaped otherwise, or a tensor of the checkpoint `model` lacks; the message says
// which model the checkpoint holds, and the fix how to resume it.
void check_model(const Manifest& manifest, const std::filesystem::path& checkpoint,
                 std::span<const ManifestTensor> model);

}  // namespace strata::engine::checkpoint
