#pragma once

// A checkpoint's manifest.json: what the run was (step, data position, world size, stage,
// tiers, optimizer, precision, the resolved config), the model's tensors, and every file with
// its size and CRC32C. Loading trusts nothing the manifest does not vouch for.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/optim/loss_scaler.h"

namespace strata::engine::checkpoint {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kManifestName = "manifest.json";

// The optimizer states a checkpoint may hold, in the order files list them.
inline constexpr const char* kMasterState = "master";  // the fp32 master weights
inline constexpr const char* kExpAvgState = "exp_avg";
inline constexpr const char* kExpAvgSqState = "exp_avg_sq";

struct ManifestTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  // A token table padded past its vocabulary (engine/param_spec.h): the rows that are tokens, the
  // rest zero; 0 for a tensor without padding. Written as "unpadded_rows" only when not 0.
  std::int64_t unpadded_rows = 0;
  std::int64_t numel() const;
  // The tensor as a Hugging Face file holds it: the shape with only the unpadded rows.
  std::vector<std::int64_t> unpadded_shape() const;
};

struct ManifestFile {
  std::string name;   // relative to the checkpoint directory
  std::string state;  // master, exp_avg or exp_avg_sq
  int rank = 0;       // the shard rank that wrote it
  std::int64_t bytes = 0;
  std::uint32_t crc32c = 0;  // of the whole file (aio/crc32c.h)
};

struct Manifest {
  int format = kFormatVersion;
  std::string tag;
  std::int64_t step = 0;     // optimizer steps applied (skipped ones not counted)
  std::int64_t batches = 0;  // batches trained: the next one is batches + 1
  std::uint64_t seed = 0;    // strata.seed: the data order and the initial weights
  int world_size = 1;        // ranks of the run
  int shard_ranks = 1;       // ranks that wrote states (1 at stage 0: every rank holds them all)
  int stage = 0;
  std::string offload_param = "none";
  std::string offload_optimizer = "none";
  std::string optimizer;  // adam, adamw, adagrad, lion
  std::string precision;  // fp32, bf16, fp16
  optim::LossScalerState loss_scaler;
  nlohmann::json config;  // the resolved config of the run that saved
  // The Hugging Face config.json the model was built from (strata.model.from_pretrained or
  // strata.model.config), as it was at the save; null for a model of strata's own shape keys.
  // `strata ckpt export --hf` writes it back beside the weights.
  nlohmann::json model_config;
  std::vector<ManifestTensor> tensors;
  std::vector<std::string> states;
  std::vector<ManifestFile> files;

  std::int64_t parameter_count() const;
  std::int64_t total_bytes() const;
};

nlohmann::json to_json(const Manifest& manifest);
// Throws UserError naming `path` and the field when a field is missing or of the wrong type,
// or the format is newer than this build reads.
Manifest manifest_from_json(const nlohmann::json& json, const std::filesystem::path& path);
// <checkpoint>/manifest.json. Throws UserError naming it when it is missing or not valid JSON.
Manifest read_manifest(const std::filesystem::path& checkpoint);
// Writes <directory>/manifest.json and makes it durable (fsync).
void write_manifest(const std::filesystem::path& directory, const Manifest& manifest);

// Writes `text` to `path` and fsyncs it (small files of the checkpoint protocol).
void write_durable(const std::filesystem::path& path, const std::string& text);
// Reads a whole small file; throws UserError naming it when it cannot be read.
std::string read_small_file(const std::filesystem::path& path);

}  // namespace strata::engine::checkpoint
