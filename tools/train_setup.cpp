#include "tools/train_setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>

#include "base/log.h"
#include "base/units.h"

namespace strata::tools {
namespace {

// Where each model state lives under the config's ZeRO stage and offload settings.
std::string describe_placement(const engine::Config& config, int world_size) {
  const engine::ZeroConfig& zero = config.zero;
  auto where = [](const engine::OffloadConfig& offload) {
    switch (offload.device) {
      case engine::OffloadDevice::cpu:
        return std::string("CPU memory");
      case engine::OffloadDevice::nvme:
        return fmt::format("NVMe under {}", offload.nvme_path);
      case engine::OffloadDevice::none:
        break;
    }
    return std::string("the device");
  };
  const std::string ranks = fmt::format("{} rank(s)", world_size);
  switch (zero.stage) {
    case 0:
      return "stage 0: parameters, gradients and optimizer states replicated on the device";
    case 1:
      return fmt::format(
          "stage 1: optimizer states sharded over {} in {}; parameters and "
          "gradients replicated on the device",
          ranks, where(zero.offload_optimizer));
    case 2:
      return fmt::format(
          "stage 2: gradients and optimizer states sharded over {}, optimizer "
          "states in {}; parameters replicated on the device",
          ranks, where(zero.offload_optimizer));
    default:
      return fmt::format(
          "stage 3: everything sharded over {}; parameters in {}, optimizer "
          "states in {}, whole modules gathered on the device only while they run",
          ranks, where(zero.offload_param), where(zero.offload_optimizer));
  }
}

// Whether the config leaves strata.model and strata.data at their defaults: no model folder,
// no shape keys, no data file.
bool names_no_model_and_no_data(const engine::Config& config) {
  const engine::ModelConfig& model = config.strata.model;
  const engine::ModelConfig defaults;
  return model.from_pretrained.empty() && model.hf_config.empty() &&
         model.n_layer == defaults.n_layer && model.n_head == defaults.n_head &&
         model.d_model == defaults.d_model && model.seq_len == defaults.seq_len &&
         model.vocab == defaults.vocab && config.strata.data.path.empty();
}

}  // namespace

void print_config_messages(const engine::LoadedConfig& loaded, bool from_file, bool verbose) {
  spdlog::logger& log = base::logger("tools");
  for (const std::string& warning : loaded.warnings)
    log.warn("{}", warning);
  if (verbose) {
    for (const std::string& note : loaded.notes)
      log.info("{}", note);
  } else if (!loaded.auto_filled.empty()) {
    log.info("\"auto\" became: {} (--verbose or `strata config check` says why)",
             fmt::join(loaded.auto_filled, ", "));
  }
  if (from_file && names_no_model_and_no_data(loaded.config)) {
    log.info(
        "the config names no model and no data (strata.model, strata.data): training strata's "
        "built-in GPT on the built-in synthetic corpus");
  }
}

void print_setup(const engine::Config& config, const models::ModelPlan& plan,
                 const models::TokenDataset& data, gpu::Device& device, int world_size,
                 std::int64_t steps) {
  const char* precision = config.bf16.enabled ? "bf16 storage, fp32 compute and master weights"
                          : config.fp16.enabled
                              ? "fp16 storage with loss scaling, fp32 compute and master weights"
                              : "fp32";
  fmt::print("strata train\n");
  fmt::print("  model      {}\n", plan.summary());
  if (!plan.from_pretrained.empty()) fmt::print("  weights    {}\n", plan.from_pretrained);
  fmt::print("  device     {} ({} budget), {} rank(s)\n", device.name(),
             base::format_bytes(static_cast<double>(device.budget_bytes())), world_size);
  fmt::print("  zero       {}\n", describe_placement(config, world_size));
  fmt::print("  precision  {}\n", precision);
  fmt::print("  optimizer  {} lr {} | scheduler {} | clipping {}\n",
             engine::to_string(config.optimizer.type), config.optimizer.lr,
             engine::to_string(config.scheduler.type),
             config.gradient_clipping > 0 ? fmt::format("{}", config.gradient_clipping)
                                          : std::string("off"));
  fmt::print("  batch      {} x {} tokens per micro-batch, {} micro-batch(es) per step, {} steps\n",
             config.batch.train_micro_batch_size_per_gpu, plan.seq_len(),
             config.batch.gradient_accumulation_steps, steps);
  fmt::print("  data       {}: {} training and {} validation tokens\n", data.source,
             data.train().size(), data.validation().size());
  if (data.examples > 0) {
    fmt::print(
        "  examples   {} with the loss on their answers, {}; {} longer than seq_len + 1 = {} "
        "tokens{}\n",
        data.examples, data.packed() ? "packed" : "one per window, padded",
        data.examples_cut == 0 ? std::string("none") : std::to_string(data.examples_cut),
        plan.seq_len() + 1, data.examples_cut == 0 ? "" : ", cut to it");
  }
  if (data.entropy_floor_nats > 0) {
    fmt::print(
        "  floor      the corpus's entropy rate is {:.4f} nats/token: no model can go "
        "below it\n",
        data.entropy_floor_nats);
  }
  std::fflush(stdout);
}

}  // namespace strata::tools
