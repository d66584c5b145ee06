// `strata estimate`: memory per tier for every ZeRO stage and offload choice, and whether each
// fits this machine. The numbers come from engine/memory_estimate.h, the model the engine is held
// to; docs/estimate.md explains every term.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/error.h"
#include "base/units.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "engine/memory_estimate.h"
#include "gpu/device_query.h"
#include "gpu/host/host_device.h"
#include "models/model_plan.h"
#include "tools/commands.h"
#include "tools/machine_probe.h"

namespace strata::tools {
namespace {

constexpr int exit_bad_usage = 2;

struct EstimateOptions {
  std::string params;
  std::string largest_layer;
  std::int64_t gpus_per_node = 0;  // 0: the GPUs this machine has (at least 1)
  std::int64_t nodes = 1;
  std::string config_path;
  bool model = false;
  bool json = false;
  std::string compare;
  std::string gpu_memory;
  bool activation_checkpointing = false;
  bool terms = false;
  std::string kv_cache;  // "SxN": generation's cache of S sequences of N positions
};

// What the table is about, besides the rows.
struct EstimatePlan {
  engine::EstimateInputs inputs;
  engine::MachineCapacity capacity;
  std::string gpu_description;  // "NVIDIA H100 80GB HBM3", "strata.device_memory_budget", ...
  std::string largest_layer_note;
  // How the model's token tables are padded (models/vocab_padding.h), for the header: the params
  // count the padded rows, which are allocated like any other. Empty when not padded.
  std::string vocab_padding;
  bool config_given = false;
};

std::int64_t parse_count_option(const std::string& name, const std::string& text) {
  std::optional<std::int64_t> count = base::parse_count(text);
  if (!count || *count <= 0) {
    throw UserError(fmt::format("{} '{}' is not a parameter count", name, text),
                    fmt::format("write a positive count such as {} 7B, 1.3B, 350M or 5e8", name),
                    exit_bad_usage);
  }
  return *count;
}

// --kv-cache SxN: the cache the config's model allocates for S sequences of N positions.
engine::EstimateInputs::KvCache kv_cache_term(const EstimateOptions& options,
                                              const std::optional<engine::Config>& config) {
  engine::EstimateInputs::KvCache cache;
  char extra = 0;
  if (std::sscanf(options.kv_cache.c_str(), "%ldx%ld%c", &cache.sequences, &cache.positions,
                  &extra) != 2 ||
      cache.sequences <= 0 || cache.positions <= 0) {
    throw UserError(fmt::format("--kv-cache {} is not SEQUENCESxPOSITIONS", options.kv_cache),
                    "write it as 8x2048: 8 sequences of 2048 positions each", exit_bad_usage);
  }
  if (!config || !options.model) {
    throw UserError(
        "--kv-cache sizes the cache from the model's layers and heads, which only "
        "--config FILE --model gives",
        "add --config FILE --model", exit_bad_usage);
  }
  models::ModelPlan sequences = models::plan_model(config->strata.model, cache.sequences);
  sequences.from_pretrained.clear();
  cache.bytes =
      engine::Engine::cache_reservation_bytes(*models::build_model(sequences), cache.sequences,
                                              cache.positions, engine::compute_type(*config));
  return cache;
}

std::optional<engine::Config> load_config(const EstimateOptions& options) {
  if (options.config_path.empty()) return std::nullopt;
  return engine::load_config_file(options.config_path).config;
}

// P and L from --params/--largest-layer, or nothing when --model supplies them.
void check_size_options(const EstimateOptions& options) {
  if (options.model && options.config_path.empty()) {
    throw UserError("--model reads the GPT shape from a config, but no --config was given",
                    "add --config FILE (its \"strata\": {\"model\": {...}} section)",
                    exit_bad_usage);
  }
  if (options.model && !options.params.empty()) {
    throw UserError("--params and --model both give the model size",
                    "drop --params to use the config's model shape, or drop --model",
                    exit_bad_usage);
  }
  if (!options.model && options.params.empty()) {
    throw UserError("nothing to estimate: no model size given",
                    "pass --params 7B (and --largest-layer 0.5B), or --config FILE --model",
                    exit_bad_usage);
  }
  if (options.model && !options.largest_layer.empty()) {
    throw UserError("--largest-layer and --model both give the largest layer",
                    "drop --largest-layer: --model computes it from the config's shape",
                    exit_bad_usage);
  }
}

void choose_sizes(const EstimateOptions& options, EstimatePlan& plan, std::int64_t& params,
                  std::int64_t& largest_layer) {
  if (options.model) return;
  params = parse_count_option("--params", options.params);
  if (options.largest_layer.empty()) {
    // One of 32 equal blocks, as in a 7B Llama-style model (32 layers of ~200M each).
    largest_layer = std::max<std::int64_t>(1, params / 32);
    plan.largest_layer_note = "--largest-layer not given: assumed P/32 (32 equal blocks)";
    return;
  }
  largest_layer = parse_count_option("--largest-layer", options.largest_layer);
  if (largest_layer > params) {
    throw UserError(fmt::format("--largest-layer {} is larger than --params {}",
                                options.largest_layer, options.params),
                    "give the parameters of the largest single module (a transformer block or "
                    "the embedding), at most the model's total",
                    exit_bad_usage);
  }
  // The step is run module by module on a counting device, the model cut into modules of L
  // parameters.
  if ((params + largest_layer - 1) / largest_layer > engine::kMaxEstimatedModules) {
    throw UserError(
        fmt::format("--largest-layer {} cuts --params {} into more than {} modules",
                    options.largest_layer, options.params, engine::kMaxEstimatedModules),
        fmt::format("give the parameters of the largest single module (a transformer block or the "
                    "embedding), at least --params / {}",
                    engine::kMaxEstimatedModules),
        exit_bad_usage);
  }
}

// GPU memory per rank: --gpu-memory, else what `strata train` would get: the smallest GPU
// (capped by a configured budget), or where train runs on the host backend (no GPU, or one this
// build cannot run on: gpu/backend.cpp) the emulated device's budget, the configured one or
// the host backend's default.
void choose_gpu_capacity(const EstimateOptions& options,
                         const std::optional<engine::Config>& config,
                         const gpu::GpuInventory& inventory, EstimatePlan& plan) {
  std::int64_t budget = config ? config->strata.device_memory_budget : 0;
  const bool host_backend = inventory.gpus.empty() || !inventory.probe_kernel_ran;
  if (!options.gpu_memory.empty()) {
    std::optional<std::int64_t> bytes = base::parse_bytes(options.gpu_memory);
    if (!bytes || *bytes <= 0) {
      throw UserError(fmt::format("--gpu-memory '{}' is not a byte size", options.gpu_memory),
                      "write a size such as --gpu-memory 80G or 24GiB", exit_bad_usage);
    }
    plan.capacity.gpu_bytes = *bytes;
    plan.gpu_description = "--gpu-memory";
  } else if (!host_backend) {
    auto smallest = std::min_element(
        inventory.gpus.begin(), inventory.gpus.end(),
        [](const auto& left, const auto& right) { return left.memory_bytes < right.memory_bytes; });
    plan.capacity.gpu_bytes = smallest->memory_bytes;
    plan.gpu_description = smallest->name;
    if (budget > 0 && budget < smallest->memory_bytes) {
      plan.capacity.gpu_bytes = budget;
      plan.gpu_description = "strata.device_memory_budget";
    }
  } else if (budget > 0) {
    plan.capacity.gpu_bytes = budget;
    plan.gpu_description = "the host backend's emulated GPU: strata.device_memory_budget";
  } else {
    plan.capacity.gpu_bytes = gpu::host::default_host_budget_bytes();
    plan.gpu_description =
        "the host backend's emulated GPU: half the RAM, as strata.device_memory_budget 0 gives it";
  }
}

void choose_host_capacity(const std::optional<engine::Config>& config, EstimatePlan& plan) {
  MemoryFacts memory = probe_memory();
  plan.capacity.cpu_bytes = memory.usable_bytes();
  plan.capacity.memlock_bytes = memory.pinned_limit.lockable_bytes();
  std::string path = std::filesystem::current_path().string();
  if (config) {
    for (const auto* offload : {&config->zero.offload_param, &config->zero.offload_optimizer}) {
      if (!offload->nvme_path.empty()) {
        path = offload->nvme_path;
        break;
      }
    }
  }
  plan.capacity.nvme_path = path;
  plan.capacity.nvme_free_bytes = free_bytes_at(path);
}

EstimatePlan make_plan(const EstimateOptions& options) {
  check_size_options(options);
  EstimatePlan plan;
  std::int64_t params = 0;
  std::int64_t largest_layer = 0;
  choose_sizes(options, plan, params, largest_layer);
  std::optional<engine::Config> config = load_config(options);
  gpu::GpuInventory inventory = gpu::query_gpus();
  std::int64_t gpus_per_node = options.gpus_per_node;
  if (gpus_per_node == 0) {
    gpus_per_node = std::max<std::int64_t>(1, static_cast<std::int64_t>(inventory.gpus.size()));
  }
  plan.config_given = config.has_value();
  if (config) {
    plan.inputs = engine::estimate_inputs_from_config(*config, params, largest_layer, gpus_per_node,
                                                      options.nodes);
  } else {
    plan.inputs.params = params;
    plan.inputs.largest_layer_params = largest_layer;
    plan.inputs.gpus_per_node = gpus_per_node;
    plan.inputs.nodes = options.nodes;
  }
  if (options.activation_checkpointing) plan.inputs.activation_checkpointing = true;
  if (config && options.model) {
    // The model's own declaration, so the estimate and the allocation cannot disagree. Its
    // weights are not needed: only the shape is.
    models::ModelPlan model_plan =
        models::plan_model(config->strata.model, config->batch.train_micro_batch_size_per_gpu);
    model_plan.from_pretrained.clear();
    const std::unique_ptr<engine::Model> model = models::build_model(model_plan);
    engine::set_model(plan.inputs, engine::declare(*model));
    if (model_plan.padded_vocab() != model_plan.vocab())
      plan.vocab_padding = fmt::format("; vocab {} padded to {} rows", model_plan.vocab(),
                                       model_plan.padded_vocab());
    plan.inputs.activation_bytes = model->activation_bytes(plan.inputs.activation_checkpointing,
                                                           engine::compute_type(*config));
  }
  if (!options.kv_cache.empty()) plan.inputs.kv_cache = kv_cache_term(options, config);
  choose_gpu_capacity(options, config, inventory, plan);
  choose_host_capacity(config, plan);
  return plan;
}

nlohmann::ordered_json optional_json(const std::optional<bool>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json row_json(const EstimatePlan& plan, const engine::EstimateRow& row,
                                bool compare_deepspeed) {
  nlohmann::ordered_json terms = nlohmann::ordered_json::array();
  for (const auto& term : row.terms) {
    terms.push_back({{"name", term.name},
                     {"tier", engine::to_string(term.tier)},
                     {"bytes_per_rank", term.bytes},
                     {"pinned", term.pinned},
                     {"formula", term.formula}});
  }
  engine::FitVerdict verdict = engine::check_fit(row, plan.capacity);
  nlohmann::ordered_json out = {{"stage", row.stage},
                                {"offload_param", engine::to_string(row.offload_param)},
                                {"offload_optimizer", engine::to_string(row.offload_optimizer)},
                                {"per_gpu_bytes", row.per_gpu_bytes},
                                {"per_node_cpu_bytes", row.per_node_cpu_bytes},
                                {"nvme_bytes", row.nvme_bytes},
                                {"pinned_bytes_per_rank", row.pinned_bytes_per_rank},
                                {"partition_numel", row.partition_numel},
                                {"fits", optional_json(verdict.fits)},
                                {"verdict", verdict.text},
                                {"params", plan.inputs.params},
                                {"largest_layer_params", plan.inputs.largest_layer_params},
                                {"gpus_per_node", plan.inputs.gpus_per_node},
                                {"nodes", plan.inputs.nodes},
                                {"terms", terms}};
  if (compare_deepspeed) {
    auto deepspeed = engine::deepspeed_estimate(plan.inputs, row.stage, row.offload_param,
                                                row.offload_optimizer);
    if (deepspeed) {
      out["deepspeed_per_gpu_bytes"] = deepspeed->per_gpu_bytes;
      out["deepspeed_per_node_cpu_bytes"] = deepspeed->per_node_cpu_bytes;
    }
  }
  return out;
}

std::string gib(std::int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

void print_header(const EstimatePlan& plan) {
  const engine::EstimateInputs& inputs = plan.inputs;
  fmt::print(
      "model: {} params, largest layer {}{}; {} GPU{} per node x {} node{} (W = {})\n",
      base::format_count(static_cast<double>(inputs.params)),
      base::format_count(static_cast<double>(inputs.largest_layer_params)),
      inputs.model ? fmt::format(" (from the config's strata.model{})", plan.vocab_padding) : "",
      inputs.gpus_per_node, inputs.gpus_per_node == 1 ? "" : "s", inputs.nodes,
      inputs.nodes == 1 ? "" : "s", inputs.world_size());
  fmt::print("parameters stored in {} ({} bytes){}; optimizer: master + {} fp32 state{}\n",
             inputs.storage_bytes == 2 ? "bf16/fp16" : "fp32", inputs.storage_bytes,
             plan.config_given ? "" : ", assumed without --config", inputs.optimizer_moments,
             inputs.optimizer_moments == 1 ? "" : "s");
  if (!plan.largest_layer_note.empty()) fmt::print("note: {}\n", plan.largest_layer_note);
  const engine::MachineCapacity& capacity = plan.capacity;
  std::string gpu = capacity.gpu_bytes
                        ? fmt::format("{} GiB ({})", gib(*capacity.gpu_bytes), plan.gpu_description)
                        : fmt::format("unknown ({})", capacity.gpu_unknown_reason);
  std::string nvme = capacity.nvme_free_bytes
                         ? fmt::format("{} GiB free", gib(*capacity.nvme_free_bytes))
                         : std::string("cannot be examined");
  fmt::print("this machine: GPU {}; CPU RAM {} GiB; {}: {}\n", gpu, gib(capacity.cpu_bytes),
             capacity.nvme_path, nvme);
}

void print_table(const EstimatePlan& plan, const std::vector<engine::EstimateRow>& rows,
                 bool compare_deepspeed, bool show_terms) {
  print_header(plan);
  std::string deepspeed_header =
      compare_deepspeed ? fmt::format(" {:>10} {:>10}", "DS GPU", "DS CPU/node") : "";
  fmt::print("\n{:<5} {:<13} {:<17} {:>10} {:>10} {:>10}{}  {}\n", "stage", "offload_param",
             "offload_optimizer", "GPU GiB", "CPU/node", "NVMe/node", deepspeed_header, "verdict");
  for (const auto& row : rows) {
    std::string deepspeed_columns;
    if (compare_deepspeed) {
      auto deepspeed = engine::deepspeed_estimate(plan.inputs, row.stage, row.offload_param,
                                                  row.offload_optimizer);
      deepspeed_columns = deepspeed ? fmt::format(" {:>10} {:>11}", gib(deepspeed->per_gpu_bytes),
                                                  gib(deepspeed->per_node_cpu_bytes))
                                    : fmt::format(" {:>10} {:>11}", "-", "-");
    }
    fmt::print("{:<5} {:<13} {:<17} {:>10} {:>10} {:>10}{}  {}\n", row.stage,
               engine::to_string(row.offload_param), engine::to_string(row.offload_optimizer),
               gib(row.per_gpu_bytes), gib(row.per_node_cpu_bytes), gib(row.nvme_bytes),
               deepspeed_columns, engine::check_fit(row, plan.capacity).text);
    if (!show_terms) continue;
    for (const auto& term : row.terms) {
      fmt::print("      {:<4} {:<24} {:>11}/rank{}  {}\n", engine::to_string(term.tier), term.name,
                 base::format_bytes(static_cast<double>(term.bytes)),
                 term.pinned ? " pinned" : "       ", term.formula);
    }
  }
  fmt::print(
      "\nGPU is per rank, CPU and NVMe per node; sizes in GiB (2^30 bytes). "
      "--terms lists each term, docs/estimate.md explains them.\n");
}

void run_estimate(const EstimateOptions& options) {
  EstimatePlan plan = make_plan(options);
  std::vector<engine::EstimateRow> rows = engine::estimate_all_rows(plan.inputs);
  bool compare_deepspeed = options.compare == "deepspeed";
  if (options.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& row : rows)
      out.push_back(row_json(plan, row, compare_deepspeed));
    fmt::print("{}\n", out.dump(2));
    return;
  }
  print_table(plan, rows, compare_deepspeed, options.terms);
}

}  // namespace

void add_estimate_command(CLI::App& app, CommandContext& /*context*/) {
  auto* command = app.add_subcommand(
      "estimate",
      "Memory per GPU, per node of CPU RAM and on NVMe for each ZeRO stage and offload choice");
  auto options = std::make_shared<EstimateOptions>();
  command->add_option("--params", options->params, "Model parameters: 7B, 1.3B, 350M, 5e8");
  command->add_option("--largest-layer", options->largest_layer,
                      "Parameters of the largest module (default: params / 32)");
  command
      ->add_option("--gpus-per-node", options->gpus_per_node,
                   "GPUs (ranks) per node (default: the GPUs of this machine, at least 1)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  command->add_option("--nodes", options->nodes, "Nodes (default 1)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  command
      ->add_option(
          "--config", options->config_path,
          "DeepSpeed or Accelerate config: precision, optimizer, bucket, buffer, sub-group and "
          "stage3 sizes, nvme_path")
      ->check(CLI::ExistingFile);
  command->add_flag("--model", options->model,
                    "Take params, largest layer and activations from the config's strata.model");
  command->add_flag("--json", options->json, "Print a JSON list with one object per row");
  command
      ->add_option("--compare", options->compare,
                   "Add DeepSpeed's estimator values for the rows it covers")
      ->check(CLI::IsMember({"deepspeed"}));
  command->add_option("--gpu-memory", options->gpu_memory,
                      "GPU memory per rank to judge fits against (default: this machine's GPU)");
  command->add_flag("--activation-checkpointing", options->activation_checkpointing,
                    "With --model: count checkpointed activations (default: as the config's "
                    "activation_checkpointing section makes the engine do)");
  command->add_flag("--terms", options->terms, "List every term of every row");
  command->add_option("--kv-cache", options->kv_cache,
                      "With --model: add generation's KV cache of S sequences x N positions "
                      "(SxN, as strata generate allocates it)");
  command->callback([options] { run_estimate(*options); });
}

}  // namespace strata::tools
