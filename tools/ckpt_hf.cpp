// strata ckpt export D --hf DIR: a checkpoint's model as a Hugging Face folder (GPT-2, or the
// Llama family the model came from), as save_pretrained writes one: config.json, and
// model.safetensors or, past --max-shard-size, model-0000k-of-0000n.safetensors shards with
// model.safetensors.index.json. Tensors carry HF's names and layouts (GPT-2's Conv1D weights
// [in, out]); a token table keeps its vocabulary's rows, not the rows strata pads it with
// (models/vocab_padding.h); a tied LM head is not written, as transformers does not write it.
//
// Into a folder that already holds a model, the export leaves only its own weights: as
// save_pretrained does, it first removes the shards (model-XXXXX-of-YYYYY.safetensors) it does
// not write again, and beyond it the other layout's file too (model.safetensors before a sharded
// export, model.safetensors.index.json before a single file): transformers and strata load
// model.safetensors whenever it is there, and a stale index beside it would still mislead any
// reader that looks for the index first. The tokenizer and generation files of the folder the model
// came from are copied beside them, so that the folder loads as a whole.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>

#include "base/assert.h"
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
namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// What save_pretrained and a tokenizer's save_pretrained write beside the weights: the
// tokenizer (fast: tokenizer.json; slow: its vocabulary files and added_tokens.json), its
// settings and chat template, and the model's generation defaults.
constexpr std::array<const char*, 10> kTokenizerFiles = {"tokenizer.json",
                                                         "tokenizer_config.json",
                                                         "special_tokens_map.json",
                                                         "added_tokens.json",
                                                         "tokenizer.model",
                                                         "vocab.json",
                                                         "merges.txt",
                                                         "vocab.txt",
                                                         "chat_template.jinja",
                                                         "generation_config.json"};

// One tensor as the HF folder holds it.
struct HfTensor {
  const ckpt::ManifestTensor* ours = nullptr;
  std::string name;  // HF's
  bool transposed = false;
  std::vector<std::int64_t> shape;  // HF's: a padded table's first unpadded_rows rows
  std::int64_t numel() const {
    std::int64_t count = 1;
    for (std::int64_t extent : shape)
      count *= extent;
    return count;
  }
};

// The checkpoint's tensors under HF's names: a Llama-family model (its tensors carry HF's names
// already) or the built-in GPT written as GPT-2 (GPT2LMHeadModel's "transformer." names).
std::vector<HfTensor> hf_tensors(const ckpt::Manifest& m, const fs::path& where) {
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
    std::vector<std::int64_t> shape = tensor.unpadded_shape();
    STRATA_ASSERT(!(hf->transposed && tensor.unpadded_rows > 0));  // tables are not transposed
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
    const std::int64_t size = tensor.numel() * element_bytes;
    if (!shards.back().empty() && bytes + size > limit) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(&tensor);
    bytes += size;
  }
  return shards;
}

// Appends `tensor` as HF lays it out, reading strata's masters in flat order: a padded table's
// first rows (the padding, all zero, is not read), a transposed weight read whole (its [out, in]
// rows), then written as [in, out].
void write_tensor(ckpt::StateStream& masters, const HfTensor& tensor,
                  ckpt::SafetensorsWriter& writer, ckpt::Dtype dtype, std::vector<float>& chunk,
                  std::vector<float>& whole, std::vector<std::uint16_t>& half) {
  const std::int64_t numel = tensor.numel();
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

// The file names an index's weight_map points at, or none when it cannot be read.
std::set<std::string> shards_of_index(const fs::path& index_path) {
  std::ifstream in(index_path);
  const json index = json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::set<std::string> names;
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    return names;
  for (const auto& [tensor, shard] : index["weight_map"].items())
    if (shard.is_string()) names.insert(shard.get<std::string>());
  return names;
}

// The weight files in `out` that a transformers or strata loader could read instead of, or
// beside, the ones this export writes (`writing`): model.safetensors, the index, every file
// named as save_pretrained names shards, and every safetensors file the old index lists.
std::vector<std::string> stale_weight_files(const fs::path& out,
                                            const std::set<std::string>& writing) {
  static const std::regex shard_name(R"(model-\d{5}-of-\d{5}\.safetensors)");
  std::set<std::string> candidates = {kSingleFile, kIndexFile};
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(out, error)) {
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, shard_name)) candidates.insert(name);
  }
  for (const std::string& name : shards_of_index(out / kIndexFile))
    if (name.find('/') == std::string::npos && name.ends_with(".safetensors"))
      candidates.insert(name);
  std::vector<std::string> stale;
  for (const std::string& name : candidates)
    if (!writing.contains(name) && fs::is_regular_file(out / name, error)) stale.push_back(name);
  return stale;
}

// Removes them, saying which; UserError with the fix when one cannot be removed.
void remove_stale_weights(const fs::path& out, const std::set<std::string>& writing) {
  const std::vector<std::string> stale = stale_weight_files(out, writing);
  for (const std::string& name : stale) {
    std::error_code error;
    fs::remove(out / name, error);
    if (error) {
      throw UserError(fmt::format("--hf {}: the earlier export's {} cannot be removed ({}); "
                                  "left there, it would be loaded instead of the new weights",
                                  out.string(), name, error.message()),
                      "make the folder writable by this user, or export into an empty folder", 1);
    }
  }
  if (!stale.empty()) {
    fmt::print("removed {} weight file(s) of an earlier export from {}: {}\n", stale.size(),
               out.string(), fmt::join(stale, ", "));
  }
}

// The Hugging Face folder the model came from, as the run's config named it
// (strata.model.from_pretrained, or the folder of strata.model.config); none for a model of
// strata's own shape keys. A relative path is as the run gave it, read from here.
std::optional<fs::path> source_folder(const ckpt::Manifest& m) {
  const json* model = nullptr;
  if (m.config.contains("strata") && m.config["strata"].contains("model"))
    model = &m.config["strata"]["model"];
  if (model == nullptr || !model->is_object()) return std::nullopt;
  const std::string from_pretrained = model->value("from_pretrained", "");
  if (!from_pretrained.empty()) return fs::path(from_pretrained);
  const std::string config = model->value("config", "");
  if (config.empty()) return std::nullopt;
  const fs::path folder = fs::path(config).parent_path();
  return folder.empty() ? fs::path(".") : folder;
}

// Copies the tokenizer and generation files of the folder the model came from into `out`,
// saying what was copied, or why nothing was.
void copy_tokenizer_files(const ckpt::Manifest& m, const fs::path& out) {
  const std::optional<fs::path> source = source_folder(m);
  if (!source) return;
  std::error_code error;
  if (!fs::is_directory(*source, error)) {
    fmt::print(
        "no tokenizer files copied: {}, the folder the model came from, is no longer there{}; "
        "copy its tokenizer files into {} by hand\n",
        source->string(),
        source->is_relative() ? fmt::format(" (relative to {})", fs::current_path(error).string())
                              : "",
        out.string());
    return;
  }
  if (fs::equivalent(*source, out, error)) return;  // the folder's own files stay as they are
  std::vector<std::string> copied;
  for (const char* name : kTokenizerFiles) {
    if (!fs::is_regular_file(*source / name, error)) continue;
    std::ifstream in(*source / name, std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!in) {
      throw UserError(
          fmt::format("{} cannot be read ({})", (*source / name).string(), std::strerror(errno)),
          "make it readable by this user, or copy it into the export by hand", 1);
    }
    // Written anew (mode 0644 less the umask, as config.json), not over an older copy's mode.
    fs::remove(out / name, error);
    ckpt::write_durable(out / name, text);
    copied.push_back(name);
  }
  if (copied.empty()) {
    fmt::print("no tokenizer files copied: {}, the folder the model came from, holds none\n",
               source->string());
    return;
  }
  fmt::print("copied from {}: {}\n", source->string(), fmt::join(copied, ", "));
}

// The shards' file names: model.safetensors alone, or model-0000k-of-0000n.safetensors.
std::vector<std::string> shard_names(std::size_t count) {
  if (count == 1) return {kSingleFile};
  std::vector<std::string> names;
  for (std::size_t k = 0; k < count; ++k)
    names.push_back(fmt::format("model-{:05}-of-{:05}.safetensors", k + 1, count));
  return names;
}

// Writes every shard, then its index when there are several; returns the weights' bytes. A
// failure removes the shards already written.
std::int64_t write_weights(const ckpt::ShardReader& reader, const fs::path& out,
                           const std::vector<std::vector<const HfTensor*>>& shards,
                           ckpt::Dtype dtype) {
  const std::vector<std::string> names = shard_names(shards.size());
  aio::Engine io = checkpoint_io();
  ckpt::StateStream masters(io, reader, ckpt::kMasterState);
  std::vector<float> chunk(static_cast<std::size_t>(kExportChunk)), whole;
  std::vector<std::uint16_t> half;
  json weight_map = json::object();
  std::int64_t total = 0;
  std::vector<fs::path> written;
  try {
    for (std::size_t k = 0; k < shards.size(); ++k) {
      std::vector<ckpt::SafetensorsWriter::Tensor> declared;
      for (const HfTensor* tensor : shards[k]) {
        declared.push_back({tensor->name, dtype, tensor->shape});
        weight_map[tensor->name] = names[k];
        total += tensor->numel() * ckpt::element_bytes(dtype);
      }
      ckpt::SafetensorsWriter writer(io, out / names[k], declared, {{"format", "pt"}});
      for (const HfTensor* tensor : shards[k])
        write_tensor(masters, *tensor, writer, dtype, chunk, whole, half);
      if (k + 1 == shards.size()) masters.finish();  // a damaged checkpoint leaves no folder
      writer.finish();
      written.push_back(out / names[k]);
    }
  } catch (...) {
    std::error_code error;
    for (const fs::path& path : written)
      fs::remove(path, error);
    throw;
  }
  if (shards.size() > 1) {
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    ckpt::write_durable(out / kIndexFile, index.dump(2) + "\n");
  }
  return total;
}

}  // namespace

int export_hf(const HfExportOptions& options) {
  const ckpt::Dtype dtype = export_dtype(options.dtype);
  const fs::path where = ckpt::resolve_checkpoint(options.path);
  const ckpt::ShardReader reader(where);
  const ckpt::Manifest& m = reader.manifest();
  const std::vector<HfTensor> tensors = hf_tensors(m, where);
  const json config = hf_config(m, tensors, dtype);
  const fs::path out = options.out_dir;
  std::error_code error;
  fs::create_directories(out, error);
  if (error) {
    throw UserError(fmt::format("--hf {} cannot be created ({})", out.string(), error.message()),
                    "give a folder in a writable place", 2);
  }

  const auto shards = plan_shards(tensors, ckpt::element_bytes(dtype), options.max_shard_bytes);
  const std::vector<std::string> names = shard_names(shards.size());
  std::set<std::string> writing(names.begin(), names.end());
  if (shards.size() > 1) writing.insert(kIndexFile);
  remove_stale_weights(out, writing);
  const std::int64_t total = write_weights(reader, out, shards, dtype);
  ckpt::write_durable(out / "config.json", config.dump(2) + "\n");
  std::int64_t parameters = 0;  // as the folder holds them: without the tables' padded rows
  for (const HfTensor& tensor : tensors)
    parameters += tensor.numel();
  fmt::print(
      "exported {} parameters of {} at step {} to {} as a Hugging Face folder: "
      "config.json and {} ({} in {} file(s))\n",
      base::format_count(static_cast<double>(parameters)), where.string(), m.step, out.string(),
      shards.size() == 1 ? kSingleFile : "the shards and their index",
      base::format_bytes(static_cast<double>(total)), shards.size());
  copy_tokenizer_files(m, out);
  return 0;
}

}  // namespace strata::tools
