#pragma once

// What `strata ckpt export` shares between its two outputs: one safetensors file of strata's
// names (ckpt.cpp) and a Hugging Face folder (ckpt_hf.cpp).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "aio/engine.h"
#include "engine/checkpoint/safetensors.h"

namespace strata::tools {

// The aio engine a checkpoint is read and written through: no sidecar checksums, the manifest's
// CRC32C of each file stands for them.
aio::Engine checkpoint_io();

// --dtype fp32, bf16 or fp16; UserError with the fix for anything else.
engine::checkpoint::Dtype export_dtype(const std::string& name);

// Appends `values` to `writer` in `dtype` (rounded to nearest even), `half` a scratch buffer.
void append_as(engine::checkpoint::SafetensorsWriter& writer, engine::checkpoint::Dtype dtype,
               std::span<const float> values, std::vector<std::uint16_t>& half);

// Elements an export converts at a time.
inline constexpr std::int64_t kExportChunk = std::int64_t{1} << 20;

struct HfExportOptions {
  std::string path;     // save directory or DIR/TAG
  std::string out_dir;  // the folder to write
  std::string dtype = "fp32";
  std::int64_t max_shard_bytes = std::int64_t{5} << 30;
};

// Writes the checkpoint's model as a Hugging Face GPT-2 folder (docs/models.md).
int export_hf(const HfExportOptions& options);

}  // namespace strata::tools
