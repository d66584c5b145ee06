// strata: the settings DeepSpeed has no key for (model shape, data, run length, GPU budget);
// strata.checkpoint is read in checkpoint_config.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string_view>

#include "base/units.h"
#include "engine/config/sections.h"

namespace strata::engine::detail {
namespace {

// " (relative to the current directory, /abs/dir)" for a relative path, which is looked up
// there, else "".
std::string relative_to_where(const std::filesystem::path& path) {
  std::error_code error;
  const std::filesystem::path here = std::filesystem::current_path(error);
  if (path.is_absolute() || error) return "";
  return fmt::format(" (relative to the current directory, {})", here.string());
}

// The Hugging Face Hub's "owner/name" for a path that is not there and reads as one: two parts of
// letters, digits, '-', '_' and '.', the first not a folder here (else a typo of a local path is
// likelier). "" when it does not.
std::string hub_id_of(const std::string& path) {
  const std::size_t slash = path.find('/');
  if (slash == 0 || slash == std::string::npos || slash + 1 == path.size() ||
      path.find('/', slash + 1) != std::string::npos || path.starts_with('.')) {
    return "";
  }
  const bool plain = std::all_of(path.begin(), path.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '/';
  });
  std::error_code error;
  if (!plain || std::filesystem::exists(path.substr(0, slash), error)) return "";
  return path;
}

// What is wrong with the folder (`key` "from_pretrained") or config.json file ("config") a model
// key names, with the fix; "" when it is there. A Hub id is refused with the command that
// downloads it, since strata reads local folders only.
std::string model_path_problem(std::string_view key, const std::string& given) {
  const bool folder = key == "from_pretrained";
  const std::filesystem::path path(given);
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    // "owner/config.json" reads as a local path mistyped, not as a Hub id.
    const std::string hub_id = folder || !given.ends_with(".json") ? hub_id_of(given) : "";
    if (hub_id.empty()) {
      return fmt::format("no such {} {}{}: give the {}", folder ? "folder" : "file", given,
                         relative_to_where(path),
                         folder ? "folder save_pretrained wrote (config.json and model.safetensors)"
                                : "path of a model's config.json");
    }
    const std::string local = hub_id.substr(hub_id.find('/') + 1);
    return fmt::format(
        "no such {} {}{}; it reads as a Hugging Face Hub id, and strata reads local folders only: "
        "download the model first (huggingface-cli download {} --local-dir {}), then set "
        "\"{}\": \"{}\"",
        folder ? "folder" : "file", given, relative_to_where(path), hub_id, local, key,
        folder ? local : local + "/config.json");
  }
  const bool is_folder = std::filesystem::is_directory(path, error);
  if (folder && !is_folder) {
    return fmt::format(
        "{} is a file, not a folder: give the folder save_pretrained wrote "
        "(config.json and model.safetensors){}",
        given,
        path.filename() == "config.json"
            ? "; for the architecture alone with fresh weights, set \"config\""
            : "");
  }
  if (folder && !std::filesystem::exists(path / "config.json", error)) {
    return fmt::format(
        "{} holds no config.json: give the folder save_pretrained wrote "
        "(config.json and model.safetensors)",
        given);
  }
  if (!folder && is_folder) {
    return fmt::format("{} is a folder: give the path of a config.json{}", given,
                       std::filesystem::exists(path / "config.json", error)
                           ? fmt::format(" ({})", (path / "config.json").string())
                           : "");
  }
  return "";
}

// The shape keys of a Hugging Face config.json (GPT-2's names), so that everything derived from
// the model's size ("auto" buckets, the estimate, the start-up summary) sees the real model.
// models/hf/hf_config.cpp reads the file whole and refuses what strata cannot build. Returns
// false, the error recorded, when the file is not there or not a JSON object.
bool read_hf_shape(JsonReader& model, std::string_view key, ModelConfig& out) {
  const std::string problem =
      model_path_problem(key, key == "from_pretrained" ? out.from_pretrained : out.hf_config);
  if (!problem.empty()) {
    model.error(key, problem);
    return false;
  }
  std::ifstream in(out.hf_config);
  nlohmann::json config;
  if (in) config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) {
    model.error(key, fmt::format("{} cannot be read as a JSON object: give the model's "
                                 "config.json as save_pretrained writes it",
                                 out.hf_config));
    return false;
  }
  auto take = [&](const char* name, std::int64_t fallback, std::int64_t& target) {
    const auto found = config.find(name);
    target =
        found != config.end() && found->is_number_integer() ? found->get<std::int64_t>() : fallback;
  };
  if (config.value("model_type", "") == "gpt2") {
    take("n_layer", 12, out.n_layer);  // GPT2Config's defaults
    take("n_head", 12, out.n_head);
    take("n_embd", 768, out.d_model);
    take("vocab_size", 50257, out.vocab);
    take("n_positions", 1024, out.positions);
    return true;
  }
  // The Llama family's names (models/hf/hf_config.cpp checks the model_type and the rest).
  take("num_hidden_layers", 32, out.n_layer);
  take("num_attention_heads", 32, out.n_head);
  take("hidden_size", 4096, out.d_model);
  take("vocab_size", 32000, out.vocab);
  take("max_position_embeddings", 2048, out.positions);
  return true;
}

void read_model(JsonReader& strata, ModelConfig& out) {
  JsonReader model(strata.find("model"), "strata.model", strata.diagnostics());
  model.read("from_pretrained", out.from_pretrained);
  model.read("config", out.hf_config);
  if (!out.from_pretrained.empty() && !out.hf_config.empty()) {
    model.error("config",
                "give from_pretrained (weights and config.json) or config (the "
                "architecture with fresh weights), not both");
  }
  if (!out.from_pretrained.empty())
    out.hf_config = (std::filesystem::path(out.from_pretrained) / "config.json").string();
  if (!out.hf_config.empty()) {
    for (const char* key : {"n_layer", "n_head", "d_model", "vocab"}) {
      if (model.has(key)) {
        model.error(key, fmt::format("the model's config.json ({}) sets the shape: remove {}",
                                     out.hf_config, key));
      }
    }
    if (!read_hf_shape(model, out.from_pretrained.empty() ? "config" : "from_pretrained", out)) {
      // Without the model's context there is no range to check seq_len against.
      model.accept({"seq_len"});
      model.finish();
      return;
    }
    // The model's context up to 2048 tokens, unless seq_len says otherwise.
    out.seq_len = std::min<std::int64_t>(out.positions, 2048);
    model.read("seq_len", out.seq_len, IntRange{1, out.positions});
    model.finish();
    return;
  }
  model.read("n_layer", out.n_layer, IntRange{1, 4096});
  model.read("n_head", out.n_head, IntRange{1, 4096});
  model.read("d_model", out.d_model, IntRange{1, 1 << 20});
  model.read("seq_len", out.seq_len, IntRange{1, 1 << 24});
  model.read("vocab", out.vocab, IntRange{2, 1 << 24});
  if (out.d_model % out.n_head != 0) {
    model.error("d_model", fmt::format("{} is not a multiple of n_head {}; each head takes "
                                       "d_model / n_head channels: choose an n_head that "
                                       "divides d_model (heads of 64 channels are usual)",
                                       out.d_model, out.n_head));
  }
  model.finish();
}

void read_data(JsonReader& strata, DataConfig& out) {
  JsonReader data(strata.find("data"), "strata.data", strata.diagnostics());
  data.read("path", out.path);
  data.read("validation_path", out.validation_path);
  data.read("validation_fraction", out.validation_fraction, RealRange{0, 0.5, true});
  if (data.read("dtype", out.dtype) && !out.dtype.empty() && out.dtype != "uint16" &&
      out.dtype != "uint32") {
    data.bad_value("dtype", "\"uint16\" or \"uint32\" (the width of a raw token array's ids)");
  }
  data.read_enum("order", out.order,
                 {{"random", DataOrder::random}, {"sequential", DataOrder::sequential}});
  data.read("packing", out.packing);
  data.finish();
}

// Bytes as an integer or as a string with a binary suffix ("512MiB", "2G").
void read_budget(JsonReader& strata, std::int64_t& out) {
  const nlohmann::json* value = strata.find("device_memory_budget");
  if (value == nullptr) return;
  if (strata.is_auto("device_memory_budget")) {
    strata.note_auto("device_memory_budget", std::to_string(out), "strata's default");
    return;
  }
  std::optional<std::int64_t> bytes;
  if (value->is_string()) bytes = base::parse_bytes(value->get<std::string>());
  if (!value->is_string() && !value->is_boolean()) bytes = json_to_int(*value);
  if (!bytes || *bytes < 0) {
    strata.bad_value("device_memory_budget",
                     "a byte count >= 0 (0 = the whole device), e.g. 268435456 or \"256MiB\"");
    return;
  }
  out = *bytes;
}

// A number that may be left out, null or "auto" (all three: not given).
void read_optional_real(JsonReader& strata, std::string_view key, RealRange range,
                        std::optional<double>& out) {
  if (!strata.has(key) || strata.find(key)->is_null() || strata.is_auto(key)) return;
  double value = 0;
  const auto errors_before = strata.diagnostics().errors.size();
  strata.read(key, value, range);
  if (strata.diagnostics().errors.size() == errors_before) out = value;
}

}  // namespace

void read_strata(JsonReader& top, StrataConfig& out, CheckpointConfig& checkpoint) {
  JsonReader strata(top.find("strata"), "strata", top.diagnostics());
  read_model(strata, out.model);
  read_data(strata, out.data);
  read_checkpoint_schedule(strata, checkpoint);
  std::int64_t seed = static_cast<std::int64_t>(out.seed);
  strata.read("seed", seed, IntRange{0, INT64_MAX});
  out.seed = static_cast<std::uint64_t>(seed);
  strata.read("train_steps", out.train_steps, IntRange{1, INT64_MAX});
  read_budget(strata, out.device_memory_budget);
  strata.read("overlap_optimizer", out.overlap_optimizer);
  strata.read("require_pinned_memory", out.require_pinned_memory);
  strata.read("allow_tf32", out.allow_tf32);
  strata.read("micro_batch_size", out.micro_batch_size, IntRange{1, std::int64_t{1} << 40});
  read_optional_real(strata, "lr", RealRange{0, 1e300}, out.lr);
  strata.read("warmup_steps", out.warmup_steps, IntRange{0, INT64_MAX});
  read_optional_real(strata, "warmup_ratio", RealRange{0, 1}, out.warmup_ratio);
  strata.read("job_name", out.job_name);
  bool name_ok = !out.job_name.empty() && out.job_name.size() <= 64;
  for (char c : out.job_name)
    name_ok = name_ok &&
              (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  if (!name_ok || out.job_name == "." || out.job_name == "..") {
    strata.bad_value("job_name",
                     "1 to 64 letters, digits, '-', '_' or '.' (it names the swap directory)");
  }
  strata.finish();
}

}  // namespace strata::engine::detail
