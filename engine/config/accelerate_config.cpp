#include "engine/config/accelerate_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "engine/config/config_error.h"
#include "engine/config/config_format.h"

namespace strata::engine::detail {
namespace {

using nlohmann::json;

// Accelerate's own settings for its launcher and for other backends: valid, not for strata.
constexpr std::string_view kLauncherKeys[] = {"compute_environment",
                                              "debug",
                                              "machine_rank",
                                              "num_machines",
                                              "gpu_ids",
                                              "main_process_ip",
                                              "main_process_port",
                                              "rdzv_backend",
                                              "same_network",
                                              "main_training_function",
                                              "enable_cpu_affinity",
                                              "fp8_config",
                                              "fsdp_config",
                                              "parallelism_config",
                                              "megatron_lm_config",
                                              "mpirun_config",
                                              "ipex_config",
                                              "downcast_bf16",
                                              "tpu_name",
                                              "tpu_zone",
                                              "tpu_use_cluster",
                                              "tpu_use_sudo",
                                              "command_file",
                                              "commands",
                                              "tpu_vm",
                                              "tpu_env",
                                              "dynamo_config",
                                              "dynamo_backend",
                                              "tpu_metrics_debug",
                                              "use_mps_device"};

constexpr std::string_view kDeepSpeedLauncherKeys[] = {
    "deepspeed_multinode_launcher", "deepspeed_hostfile", "deepspeed_exclusion_filter",
    "deepspeed_inclusion_filter", "deepspeed_moe_layer_cls_names"};

// The deepspeed_config keys Accelerate refuses beside deepspeed_config_file
// (DeepSpeedPlugin._deepspeed_config_checks), with mixed_precision from the top level.
constexpr std::string_view kReplacedByFile[] = {
    "gradient_accumulation_steps", "gradient_clipping",     "zero_stage",
    "offload_optimizer_device",    "offload_param_device",  "offload_param_nvme_path",
    "offload_optimizer_nvme_path", "zero3_save_16bit_model"};

void note(Diagnostics& diagnostics, std::string text) {
  diagnostics.notes.push_back(std::move(text));
}

// mixed_precision as Accelerate's launcher reads it; PyYAML turns an unquoted `no` into false.
// Accelerate's older `fp16: true` key means mixed_precision fp16 (config_args.py reads it so).
std::string read_mixed_precision(JsonReader& top) {
  const json* value = top.find("mixed_precision");
  bool legacy_fp16 = false;
  top.read("fp16", legacy_fp16);
  if ((value == nullptr || value->is_null()) && legacy_fp16) return "fp16";
  if (value == nullptr || value->is_null() || *value == false) return "no";
  if (!value->is_string()) {
    top.bad_value("mixed_precision", "one of \"no\", \"fp16\", \"bf16\"");
    return "no";
  }
  std::string mode = lowercase(value->get<std::string>());
  if (mode == "fp8") {
    top.unsupported("mixed_precision", "FP8 training",
                    "use \"bf16\" (strata trains in bf16, fp16 or fp32)");
  } else if (mode != "no" && mode != "fp16" && mode != "bf16") {
    top.bad_value("mixed_precision", "one of \"no\", \"fp16\", \"bf16\"");
  }
  return mode;
}

void check_launch(JsonReader& top, int world_size) {
  const json* type = top.find("distributed_type");
  if (type == nullptr || !type->is_string() || lowercase(type->get<std::string>()) != "deepspeed") {
    std::string given = type == nullptr ? "nothing" : show(*type);
    top.error("distributed_type",
              fmt::format("got {}, expected \"DEEPSPEED\": strata reads the DeepSpeed side of "
                          "Accelerate configs; set distributed_type: DEEPSPEED with a "
                          "deepspeed_config block (zero_stage: 0 is plain data parallelism)",
                          given));
  }
  std::int64_t processes = -1;
  top.read("num_processes", processes, IntRange{-1, 1 << 20});
  if (processes > 0 && processes != world_size) {
    top.diagnostics().warnings.push_back(fmt::format(
        "num_processes: {}, but this run has {} rank(s): strata's ranks come from the MPI "
        "launcher; start it with mpirun -np {}",
        processes, world_size, processes));
  }
  bool use_cpu = false;
  top.read("use_cpu", use_cpu);
  if (use_cpu) {
    top.diagnostics().warnings.push_back(
        "use_cpu: true is Accelerate's CPU-only mode without DeepSpeed; strata ignores it and "
        "trains on the GPU, or on its host backend when there is none");
  }
  std::vector<std::string_view> launcher;
  for (std::string_view key : kLauncherKeys)
    if (top.has(key)) launcher.push_back(key);
  if (!launcher.empty()) {
    note(top.diagnostics(),
         fmt::format("{}: Accelerate launcher settings, not used by strata (its ranks come from "
                     "the MPI launcher)",
                     fmt::join(launcher, ", ")));
  }
}

// Reads offload_<what>_device and its nvme_path into the section DeepSpeed would get.
json read_offload(JsonReader& ds, std::string_view what) {
  const std::string device_key = fmt::format("offload_{}_device", what);
  const std::string path_key = fmt::format("offload_{}_nvme_path", what);
  std::string device = "none";
  ds.read(device_key, device);
  device = lowercase(device);
  if (device != "none" && device != "cpu" && device != "nvme") {
    ds.bad_value(device_key, "one of \"none\", \"cpu\", \"nvme\"");
    device = "none";
  }
  std::string path;
  ds.read(path_key, path);
  json section = {{"device", device}};
  if (device != "nvme") return section;
  if (path.empty() || lowercase(path) == "none") {
    ds.error(path_key, fmt::format("missing; {} nvme needs the directory for swap files, e.g. {}: "
                                   "/local_nvme (a fast local disk, not tmpfs or NFS)",
                                   device_key, path_key));
  }
  section["nvme_path"] = path;
  return section;
}

// Accelerate's plugin without a DeepSpeed file: the config its __post_init__ builds.
json build_from_keys(JsonReader& ds, const std::string& mixed_precision) {
  std::int64_t stage = 2;  // ACCELERATE_DEEPSPEED_ZERO_STAGE's default
  ds.read("zero_stage", stage, IntRange{0, 3});
  json zero = {{"stage", stage},
               {"offload_optimizer", read_offload(ds, "optimizer")},
               {"offload_param", read_offload(ds, "param")}};
  bool save_16bit = false;
  ds.read("zero3_save_16bit_model", save_16bit);
  zero["stage3_gather_16bit_weights_on_model_save"] = save_16bit;
  json out = {{"train_batch_size", "auto"},
              {"train_micro_batch_size_per_gpu", "auto"},
              {"gradient_accumulation_steps", "auto"},
              {"gradient_clipping", "auto"},
              {"zero_optimization", zero}};
  // Checked here, so that a bad value is named by its Accelerate key; "auto" stays for the
  // DeepSpeed reader to resolve as the HF Trainer does.
  if (ds.has("gradient_accumulation_steps") && !ds.is_auto("gradient_accumulation_steps")) {
    std::optional<std::int64_t> gas;
    ds.read("gradient_accumulation_steps", gas, IntRange{1, std::int64_t{1} << 40});
    if (gas) out["gradient_accumulation_steps"] = *gas;
  }
  if (ds.has("gradient_clipping") && !ds.is_auto("gradient_clipping") &&
      !ds.find("gradient_clipping")->is_null()) {
    double clipping = 0;
    ds.read("gradient_clipping", clipping, RealRange{0, 1e300});
    out["gradient_clipping"] = clipping;
  }
  out["fp16"] = {{"enabled", mixed_precision == "fp16"}};
  if (mixed_precision == "fp16") out["fp16"]["auto_cast"] = true;
  out["bf16"] = {{"enabled", mixed_precision == "bf16"}};
  note(ds.diagnostics(),
       fmt::format("zero_optimization.stage {}, offload_optimizer {}, offload_param {}, "
                   "mixed precision {}: from the Accelerate config (Accelerate's defaults where "
                   "not given: stage 2, no offload, no mixed precision)",
                   stage, zero["offload_optimizer"]["device"].get<std::string>(),
                   zero["offload_param"]["device"].get<std::string>(), mixed_precision));
  return out;
}

// Accelerate fills "auto" at the keys it maps (DeepSpeedPlugin.fill_match) with its own
// defaults, not DeepSpeed's: stage 2, no offload, no 16-bit gather.
void fill_accelerate_defaults(json& config, Diagnostics& diagnostics) {
  struct Fill {
    const char* pointer;
    json value;
  };
  const Fill fills[] = {{"/zero_optimization/stage", 2},
                        {"/zero_optimization/offload_optimizer/device", "none"},
                        {"/zero_optimization/offload_param/device", "none"},
                        {"/zero_optimization/stage3_gather_16bit_weights_on_model_save", false}};
  for (const Fill& fill : fills) {
    const json::json_pointer pointer(fill.pointer);
    if (!config.contains(pointer) || config[pointer] != "auto") continue;
    config[pointer] = fill.value;
    std::string path = pointer.to_string().substr(1);
    std::replace(path.begin(), path.end(), '/', '.');
    note(diagnostics,
         fmt::format("{}: \"auto\" -> {} (Accelerate's default)", path, show(fill.value)));
  }
}

std::filesystem::path resolve_file(const std::string& given, const std::filesystem::path& yaml) {
  std::filesystem::path file(given);
  std::error_code error;
  if (file.is_relative() && !std::filesystem::exists(file, error)) {
    // Accelerate opens the path from where it was launched; a path written relative to the YAML
    // file is accepted too, so the pair can be moved together.
    std::filesystem::path beside = yaml.parent_path() / file;
    if (std::filesystem::exists(beside, error)) return beside;
  }
  return file;
}

// Accelerate's plugin with deepspeed_config_file: that file is the DeepSpeed config.
json load_file(JsonReader& top, JsonReader& ds, const std::filesystem::path& yaml,
               std::string& source) {
  for (std::string_view key : kReplacedByFile) {
    if (ds.has(key))
      ds.error(key,
               "given beside deepspeed_config_file, which Accelerate refuses; set it in the "
               "DeepSpeed config file and remove it here");
  }
  if (const json* mixed = top.find("mixed_precision"); mixed != nullptr && !mixed->is_null())
    top.error("mixed_precision",
              "given beside deepspeed_config.deepspeed_config_file, which Accelerate refuses; set "
              "\"bf16\" or \"fp16\" in the DeepSpeed config file and remove it here");
  std::string given;
  ds.read("deepspeed_config_file", given);
  const std::filesystem::path file = resolve_file(given, yaml);
  std::error_code error;
  if (!std::filesystem::is_regular_file(file, error)) {
    ds.error("deepspeed_config_file",
             fmt::format("{}: no such file, from the current directory nor beside {}; give the "
                         "path of the DeepSpeed JSON config (relative paths are read from where "
                         "strata runs, as Accelerate reads them from where it is launched)",
                         given, yaml.filename().string()));
    return json::object();
  }
  source = file.string();
  json out = parse_json_text(read_config_text(file, "a DeepSpeed JSON config"), source);
  if (!out.is_object() || !out.contains("zero_optimization")) {
    ds.error("deepspeed_config_file",
             fmt::format("{} has no zero_optimization section, which Accelerate requires "
                         "(\"Please specify the ZeRO optimization config in the DeepSpeed "
                         "config.\"); add \"zero_optimization\": {{\"stage\": 2}} or the stage "
                         "you want",
                         file.string()));
    return json::object();
  }
  if (!out.contains("gradient_accumulation_steps")) out["gradient_accumulation_steps"] = 1;
  // Accelerate sizes the micro-batch from the script's data loader when the file does not.
  if (!out.contains("train_batch_size") && !out.contains("train_micro_batch_size_per_gpu"))
    out["train_micro_batch_size_per_gpu"] = "auto";
  fill_accelerate_defaults(out, ds.diagnostics());
  note(ds.diagnostics(),
       fmt::format("the DeepSpeed config is {} (deepspeed_config_file); fp16/bf16 \"auto\" follow "
                   "mixed precision \"no\", as Accelerate fills them without --mixed_precision",
                   file.string()));
  return out;
}

void carry_strata(JsonReader& top, json& out) {
  const json* strata = top.find("strata");
  if (strata == nullptr) return;
  if (out.contains("strata")) {
    top.error("strata",
              "given in the Accelerate config and in its deepspeed_config_file; keep "
              "one of them");
    return;
  }
  out["strata"] = *strata;
}

}  // namespace

bool is_accelerate_config(const json& root) {
  return root.is_object() &&
         (root.contains("distributed_type") || root.contains("compute_environment"));
}

AccelerateConfig accelerate_to_deepspeed(const json& accelerate, const std::filesystem::path& path,
                                         int world_size, Diagnostics& diagnostics) {
  JsonReader top(&accelerate, "", diagnostics);
  check_launch(top, world_size);
  const std::string mixed_precision = read_mixed_precision(top);
  JsonReader ds(top.find("deepspeed_config"), "deepspeed_config", diagnostics);
  top.set_default_source("Accelerate's default");
  ds.set_default_source("Accelerate's default");
  for (std::string_view key : kDeepSpeedLauncherKeys)
    ds.accept({key});
  ds.accept({"zero3_init_flag"});  // strata always builds a partitioned model, as zero.Init does
  std::string source = path.string();
  json out = ds.has("deepspeed_config_file") ? load_file(top, ds, path, source)
                                             : build_from_keys(ds, mixed_precision);
  carry_strata(top, out);
  if (!out.contains("optimizer")) {
    note(diagnostics,
         "optimizer: left to the training script by Accelerate; strata's default "
         "AdamW, its lr from strata.lr when given");
  }
  // Accelerate ignores what its launcher does not know inside deepspeed_config, and refuses
  // unknown keys at the top of its file.
  ds.finish(/*as_warnings=*/true);
  top.finish();
  return {std::move(out), std::move(source)};
}

}  // namespace strata::engine::detail
