// strata ckpt export D --hf DIR: a checkpoint's model as a Hugging Face folder (GPT-2, or the
// Llama family the model came from), as
// save_pretrained writes one: config.json, and model.safetensors or, past --max-shard-size,
// model-0000k-of-0000n.safetensors shards with model.safetensors.index.json. Tensors carry HF's
// names and layouts (GPT-2's Conv1D weights [in, out]); a tied LM head is not written, as
// transformers does not write it.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.h"
#include "base/units.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/save_directory.h"
#include "engine/checkpoint/shard_reader.h"
#include "engine/checkpoint/state_stream.h"
#include "models/hf/hf_names.h"
#include "tools/ckpt_export.h"

namespace strata::tools {
namespace {

namespace ckpt = engine::checkpoint;
using nlohmann::json;

// One tensor as the HF folder holds it.
struct HfTensor {
  const ckpt::ManifestTensor* ours = nullptr;
  std::string name;  // HF's
  bool transposed = false;
  std::vector<std::int64_t> shape;  // HF's
};

// The checkpoint's tensors under HF's names: a Llama-family model (its tensors carry HF's names
// already) or the built-in GPT written as GPT-2 (GPT2LMHeadModel's "transformer." names).
std::vector<HfTensor> hf_tensors(const ckpt::Manifest& m, const std::filesystem::path& where) {
  const bool llama = !m.tensors.empty() && m.tensors.front().name == "model.embed_tokens.weight";
  const models::HfNaming& naming = llama ? models::llama_naming() : models::gpt2_naming();
  const std::string prefix = naming.prefixes.front();
  std::vector<HfTensor> tensors;
  for (const ckpt::ManifestTensor& tensor : m.tensors) {
    const std::optional<models::HfName> hf = naming.name(tensor.name);
    if (!hf) {
      throw UserError(fmt::format("{}: tensor \"{}\" is not one of a {} model's, which is what "
                                  "export --hf writes",
                                  where.string(), tensor.name, naming.architecture),
                      "export the weights under strata's names with --out FILE.safetensors", 2);
    }
    std::vector<std::int64_t> shape = tensor.shape;
    if (hf->transposed) std::swap(shape[0], shape[1]);
    tensors.push_back({&tensor, prefix + hf->name, hf->transposed, shape});
  }
  if (llama && !m.model_config.is_object()) {
    throw UserError(fmt::format("{}: the manifest keeps no config.json for this Llama-family "
                                "model",
                                where.string()),
                    "save the checkpoint again with this strata (it keeps the model's "
                    "config.json), or write config.json beside the export by hand",
                    2);
  }
  return tensors;
}

const char* torch_dtype(ckpt::Dtype dtype) {
  return dtype == ckpt::Dtype::bf16  ? "bfloat16"
         : dtype == ckpt::Dtype::f16 ? "float16"
                                     : "float32";
}

// The config.json the model came from (kept in the manifest), or GPT2Config's keys for a model
// of strata's own shape keys; torch_dtype says what the weights are written in.
json hf_config(const ckpt::Manifest& m, const std::vector<HfTensor>& tensors, ckpt::Dtype dtype) {
  json config = m.model_config;
  if (!config.is_object()) {
    const json model = m.config.at("strata").at("model");
    const std::vector<std::int64_t>& wpe = tensors.at(1).ours->shape;
    config = {{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"n_layer", model.at("n_layer")},
              {"n_head", model.at("n_head")},
              {"n_embd", model.at("d_model")},
              {"vocab_size", model.at("vocab")},
              {"n_positions", wpe.at(0)},
              {"n_inner", nullptr},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", 1e-5},
              {"initializer_range", 0.02},
              {"tie_word_embeddings", true}};
  }
  config["torch_dtype"] = torch_dtype(dtype);
  return config;
}

// Consecutive runs of tensors, each run's bytes at most `limit` (a tensor larger than the limit
// gets a shard of its own, as save_pretrained does).
std::vector<std::vector<const HfTensor*>> plan_shards(const std::vector<HfTensor>& tensors,
                                                      std::int64_t element_bytes,
                                                      std::int64_t limit) {
  std::vector<std::vector<const HfTensor*>> shards(1);
  std::int64_t bytes = 0;
  for (const HfTensor& tensor : tensors) {
    const std::int64_t size = tensor.ours->numel() * element_bytes;
    if (!shards.back().empty() && bytes + size > limit) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(&tensor);
    bytes += size;
  }
  return shards;
}

// Appends `tensor` as HF lays it out, reading strata's masters in flat order: a transposed weight
// is read whole (its [out, in] rows), then written as [in, out].
void write_tensor(ckpt::StateStream& masters, const HfTensor& tensor,
                  ckpt::SafetensorsWriter& writer, ckpt::Dtype dtype, std::vector<float>& chunk,
                  std::vector<float>& whole, std::vector<std::uint16_t>& half) {
  const std::int64_t numel = tensor.ours->numel();
  if (!tensor.transposed) {
    for (std::int64_t at = 0; at < numel; at += kExportChunk) {
      const auto count = static_cast<std::size_t>(std::min(kExportChunk, numel - at));
      std::span<float> values = std::span(chunk).first(count);
      masters.read(tensor.ours->name, at, values);
      append_as(writer, dtype, values, half);
    }
    return;
  }
  const std::int64_t rows = tensor.ours->shape[0], cols = tensor.ours->shape[1];
  whole.resize(static_cast<std::size_t>(numel));
  masters.read(tensor.ours->name, 0, whole);
  std::vector<float>& transposed = chunk;
  transposed.resize(std::max<std::size_t>(chunk.size(), whole.size()));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      transposed[static_cast<std::size_t>(c * rows + r)] =
          whole[static_cast<std::size_t>(r * cols + c)];
  append_as(writer, dtype, std::span(transposed).first(whole.size()), half);
}

}  // namespace

int export_hf(const HfExportOptions& options) {
  const ckpt::Dtype dtype = export_dtype(options.dtype);
  const std::filesystem::path where = ckpt::resolve_checkpoint(options.path);
  const ckpt::ShardReader reader(where);
  const ckpt::Manifest& m = reader.manifest();
  const std::vector<HfTensor> tensors = hf_tensors(m, where);
  const json config = hf_config(m, tensors, dtype);
  const std::filesystem::path out = options.out_dir;
  std::error_code error;
  std::filesystem::create_directories(out, error);
  if (error) {
    throw UserError(fmt::format("--hf {} cannot be created ({})", out.string(), error.message()),
                    "give a folder in a writable place", 2);
  }

  const auto shards = plan_shards(tensors, ckpt::element_bytes(dtype), options.max_shard_bytes);
  const auto shard_name = [&](std::size_t k) {
    return shards.size() == 1
               ? std::string("model.safetensors")
               : fmt::format("model-{:05}-of-{:05}.safetensors", k + 1, shards.size());
  };
  aio::Engine io = checkpoint_io();
  ckpt::StateStream masters(io, reader, ckpt::kMasterState);
  std::vector<float> chunk(static_cast<std::size_t>(kExportChunk)), whole;
  std::vector<std::uint16_t> half;
  json weight_map = json::object();
  std::int64_t total = 0;
  std::vector<std::filesystem::path> written;
  try {
    for (std::size_t k = 0; k < shards.size(); ++k) {
      std::vector<ckpt::SafetensorsWriter::Tensor> declared;
      for (const HfTensor* tensor : shards[k]) {
        declared.push_back({tensor->name, dtype, tensor->shape});
        weight_map[tensor->name] = shard_name(k);
        total += tensor->ours->numel() * ckpt::element_bytes(dtype);
      }
      ckpt::SafetensorsWriter writer(io, out / shard_name(k), declared, {{"format", "pt"}});
      for (const HfTensor* tensor : shards[k])
        write_tensor(masters, *tensor, writer, dtype, chunk, whole, half);
      if (k + 1 == shards.size()) masters.finish();  // a damaged checkpoint leaves no folder
      writer.finish();
      written.push_back(out / shard_name(k));
    }
  } catch (...) {
    for (const std::filesystem::path& path : written)
      std::filesystem::remove(path, error);
    throw;
  }
  if (shards.size() > 1) {
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    ckpt::write_durable(out / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  ckpt::write_durable(out / "config.json", config.dump(2) + "\n");
  fmt::print(
      "exported {} parameters of {} at step {} to {} as a Hugging Face folder: "
      "config.json and {} ({} in {} file(s))\n",
      base::format_count(static_cast<double>(m.parameter_count())), where.string(), m.step,
      out.string(), shards.size() == 1 ? "model.safetensors" : "the shards and their index",
      base::format_bytes(static_cast<double>(total)), shards.size());
  return 0;
}

}  // namespace strata::tools
