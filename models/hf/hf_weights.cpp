// A Hugging Face folder's safetensors, one file or the shards of an index, mapped and read by
// tensor name.
#include "models/hf/hf_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/assert.h"
#include "base/error.h"
#include "cpu_adam/half.h"

namespace strata::models {
namespace {

using engine::checkpoint::Dtype;
using engine::checkpoint::SafetensorsFile;
using nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// A shard file an index names and the tensors it maps to that file, by name.
struct Shard {
  std::string file;
  std::vector<std::string> tensors;
};

// The shards an index maps tensors to, each once, in the order first named.
std::vector<Shard> shards_of(const std::filesystem::path& index_path) {
  const std::string fix = "download the model again: its index must list every tensor's shard";
  std::ifstream in(index_path);
  json index;
  try {
    index = json::parse(in);
  } catch (const json::exception& error) {
    throw UserError(fmt::format("{}: not JSON ({})", index_path.string(), error.what()), fix, 2);
  }
  const auto map = index.find("weight_map");
  if (!index.is_object() || map == index.end() || !map->is_object()) {
    throw UserError(fmt::format("{}: has no \"weight_map\" object", index_path.string()), fix, 2);
  }
  std::vector<Shard> shards;
  std::map<std::string, std::size_t> position;
  for (const auto& [tensor, shard] : map->items()) {
    if (!shard.is_string()) {
      throw UserError(
          fmt::format("{}: the shard of \"{}\" is not a file name", index_path.string(), tensor),
          fix, 2);
    }
    const auto [at, added] = position.emplace(shard.get<std::string>(), shards.size());
    if (added) shards.push_back(Shard{shard.get<std::string>(), {}});
    shards[at->second].tensors.push_back(tensor);
  }
  return shards;
}

// Refuses a shard the index names that is not in the folder, naming the file and the first
// tensors it should hold, so that a partial download says what it lacks.
void check_shard_present(const std::filesystem::path& folder, const Shard& shard,
                         std::size_t shard_count) {
  std::error_code error;
  if (std::filesystem::is_regular_file(folder / shard.file, error)) return;
  constexpr std::size_t kNamed = 3;
  std::string named;
  for (std::size_t i = 0; i < std::min(kNamed, shard.tensors.size()); ++i)
    named += fmt::format("{}\"{}\"", i == 0 ? "" : ", ", shard.tensors[i]);
  if (shard.tensors.size() > kNamed) named += ", ...";
  throw UserError(
      fmt::format("{}: no such file, but {} maps {} tensor{} to it ({})",
                  (folder / shard.file).string(), kIndexFile, shard.tensors.size(),
                  shard.tensors.size() == 1 ? "" : "s", named),
      fmt::format("download the model again, all {} shard file{} its index lists (an interrupted "
                  "download leaves some out)",
                  shard_count, shard_count == 1 ? "" : "s"),
      2);
}

}  // namespace

HfWeights HfWeights::open(const std::filesystem::path& folder) {
  HfWeights weights;
  weights.folder_ = folder;
  std::vector<std::string> names;
  std::error_code error;
  // The single file first, then the index: transformers' from_pretrained looks for them in that
  // order (modeling_utils.py, SAFE_WEIGHTS_NAME before SAFE_WEIGHTS_INDEX_NAME), so a folder that
  // holds both loads the same weights in either.
  if (std::filesystem::is_regular_file(folder / kSingleFile, error)) {
    names = {kSingleFile};
  } else if (std::filesystem::is_regular_file(folder / kIndexFile, error)) {
    const std::vector<Shard> shards = shards_of(folder / kIndexFile);
    for (const Shard& shard : shards) {
      check_shard_present(folder, shard, shards.size());
      names.push_back(shard.file);
    }
  } else {
    throw UserError(
        fmt::format("{} holds neither {} nor {}", folder.string(), kSingleFile, kIndexFile),
        "point strata.model.from_pretrained at a folder as save_pretrained writes it with "
        "safetensors (for .bin weights: load them in transformers and save_pretrained again)",
        2);
  }
  weights.files_.reserve(names.size());
  for (const std::string& name : names)
    weights.files_.push_back(SafetensorsFile::open(folder / name));
  for (const SafetensorsFile& file : weights.files_) {
    for (const engine::checkpoint::TensorEntry& entry : file.tensors()) {
      const bool added =
          weights.tensors_.emplace(entry.name, Tensor{entry.name, &file, &entry}).second;
      if (!added) {
        throw UserError(
            fmt::format("{}: tensor \"{}\" is in two files", folder.string(), entry.name),
            "download the model again", 2);
      }
    }
  }
  return weights;
}

const HfWeights::Tensor* HfWeights::find(std::string_view name) const {
  const auto found = tensors_.find(name);
  return found == tensors_.end() ? nullptr : &found->second;
}

void HfWeights::check_float(const Tensor& tensor) {
  const Dtype dtype = tensor.entry->dtype;
  if (dtype == Dtype::f32 || dtype == Dtype::bf16 || dtype == Dtype::f16) return;
  throw UserError(
      fmt::format("{}: tensor \"{}\" is {}; strata loads F32, BF16 and F16 weights",
                  tensor.file->path().string(), tensor.name, engine::checkpoint::to_string(dtype)),
      "save the model in one of those dtypes (quantized checkpoints are not loaded)", 2);
}

void HfWeights::read(const Tensor& tensor, std::int64_t first, std::span<float> out) {
  if (tensor.entry->dtype == Dtype::f32) {
    STRATA_ASSERT(first >= 0 &&
                  first + static_cast<std::int64_t>(out.size()) <= tensor.entry->numel());
    std::memcpy(out.data(), tensor.file->data(*tensor.entry).data() + first * 4, out.size_bytes());
    return;
  }
  read_strided(tensor, first, 1, out);
}

void HfWeights::read_strided(const Tensor& tensor, std::int64_t first, std::int64_t stride,
                             std::span<float> out) {
  STRATA_ASSERT(first >= 0 && stride >= 1);
  STRATA_ASSERT(out.empty() ||
                first + stride * static_cast<std::int64_t>(out.size() - 1) < tensor.entry->numel());
  const std::byte* data = tensor.file->data(*tensor.entry).data();
  const Dtype dtype = tensor.entry->dtype;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto at = static_cast<std::size_t>(first + stride * static_cast<std::int64_t>(i));
    if (dtype == Dtype::f32) {
      std::memcpy(&out[i], data + at * 4, 4);
    } else if (dtype == Dtype::bf16) {
      cpu_adam::bf16 value;
      std::memcpy(&value.bits, data + at * 2, 2);
      out[i] = cpu_adam::to_float(value);
    } else {
      STRATA_ASSERT(dtype == Dtype::f16);  // check_float lets only float dtypes through
      cpu_adam::fp16 value;
      std::memcpy(&value.bits, data + at * 2, 2);
      out[i] = cpu_adam::to_float(value);
    }
  }
}

}  // namespace strata::models
