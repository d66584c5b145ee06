#pragma once

// strata's own prediction of its memory use per tier (GPU, CPU RAM, NVMe), term by term, for one
// ZeRO stage and one offload choice. The engine is held to these numbers: each term names one
// buffer (or one set of buffers) the engine allocates, and docs/estimate.md gives its formula and
// why it differs from DeepSpeed's estimators.
//
// Notation used in the comments: P = parameters, L = parameters of the largest module,
// W = ranks (gpus_per_node * nodes), S = bytes of the storage type (2 with bf16/fp16, 4 without),
// part = the elements of one rank's flat partition (engine/zero/flat_layout.h: each module's flat
// buffer cut into W equal shards of a multiple of 2048 elements; W = 1 at stage 0),
// padded(m) and shard(m) = module m's padded flat buffer and one rank's shard of it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/param_spec.h"

namespace strata::engine {

class Model;

// A model as it declares itself: each module's parameters in order, and the modules each one
// borrows (a tied head borrows the embedding). models/ describes its models this way
// (models::declare); the estimate lays them out as the engine would, so the two cannot disagree.
struct DeclaredModel {
  std::vector<std::vector<ParamSpec>> modules;
  std::vector<std::vector<int>> lenders;  // per module

  std::int64_t parameter_count() const;
  std::int64_t largest_module() const;  // elements of the largest module
};

// The model's modules and their parameters as the estimate reads them.
DeclaredModel declare(Model& model);

// Everything the estimate reads. The defaults are DeepSpeed's (a config without these keys),
// except the storage type: without a config the estimate assumes bf16 (2 bytes).
struct EstimateInputs {
  std::int64_t params = 0;                // P
  std::int64_t largest_layer_params = 0;  // L
  std::int64_t gpus_per_node = 1;
  std::int64_t nodes = 1;

  // The engine's working copy of the parameters (the tier's shards and the gathered modules the
  // ops compute with): 2 bytes with bf16 or fp16 enabled, 4 without.
  std::int64_t storage_bytes = 2;
  // fp32 optimizer states besides the master weights: 2 for Adam/AdamW, 1 for Adagrad and Lion.
  std::int64_t optimizer_moments = 2;
  // An offloaded optimizer's element bytes: master weights and gradients 4, or 2 with
  // bf16.bf16_master_weights_and_grads; moments 4, or 2 with bf16.bf16_optimizer_states.
  std::int64_t master_bytes = 4;
  std::int64_t moment_bytes = 4;
  std::int64_t gradient_accumulation_steps = 1;

  // zero_optimization, in elements
  std::int64_t reduce_bucket_size = 500'000'000;
  std::int64_t stage3_max_live_parameters = 1'000'000'000;
  std::int64_t stage3_param_persistence_threshold = 100'000;
  std::int64_t stage3_max_reuse_distance = 1'000'000'000;
  std::int64_t stage3_prefetch_bucket_size = 50'000'000;
  std::int64_t sub_group_size = 1'000'000'000;
  // offload_param
  std::int64_t param_buffer_count = 5;
  std::int64_t max_in_cpu = 1'000'000'000;  // elements
  bool param_pin_memory = true;
  // offload_optimizer
  std::int64_t optimizer_buffer_count = 4;
  bool optimizer_pin_memory = true;
  // strata.overlap_optimizer with a step that clipping or an overflow check can change: the
  // rollback window (buffer_count sub-groups' prior values).
  bool overlap_rollback = false;

  // Known only with --model: the module sizes (layout, persistence, the step's peak) and
  // activations. Without it the model is cut into modules of L elements (the last one smaller).
  std::optional<DeclaredModel> model;
  std::int64_t micro_batch = 1;  // train_micro_batch_size_per_gpu
  // As the engine decides it: activation_checkpointing.partition_activations or
  // number_checkpoints > 0.
  bool activation_checkpointing = false;
  // The model's own activation memory for one micro-batch (models/ sizes it; engine/ cannot
  // include models/, so the caller fills it in). No term when unknown.
  std::optional<std::int64_t> activation_bytes;
  // Generation's KV cache (strata estimate --kv-cache SxN: S sequences of N positions), sized by
  // the model as the engine allocates it (Model::cache_bytes). No term when not asked for.
  struct KvCache {
    std::int64_t sequences = 0;
    std::int64_t positions = 0;
    std::int64_t bytes = 0;
  };
  std::optional<KvCache> kv_cache;

  std::int64_t world_size() const { return gpus_per_node * nodes; }
};

// The most modules the estimate steps through: without --model, P / L above this is refused by
// the caller (the step is run module by module on a counting device).
inline constexpr std::int64_t kMaxEstimatedModules = 100'000;

// Fills the inputs from a loaded config (its zero_optimization, offload_*, bf16/fp16, optimizer,
// batch and activation_checkpointing sections). `params` and `largest_layer_params` come from
// the caller; set_model replaces them with the counts of a declared model (strata estimate
// --model: the model strata.model describes, models::declare).
EstimateInputs estimate_inputs_from_config(const Config& config, std::int64_t params,
                                           std::int64_t largest_layer_params,
                                           std::int64_t gpus_per_node, std::int64_t nodes);
// Sets the model the estimate lays out (modules, persistence, the step's peak), and P and L from
// it.
void set_model(EstimateInputs& inputs, DeclaredModel model);

enum class Tier { gpu, cpu, nvme };

const char* to_string(Tier tier);

// One buffer (or set of buffers) of one rank.
struct MemoryTerm {
  std::string name;  // "optimizer_states", "gathered_params", ...
  Tier tier = Tier::gpu;
  std::int64_t bytes = 0;  // per rank
  bool pinned = false;     // page-locked CPU memory (counts against RLIMIT_MEMLOCK)
  std::string formula;     // "4 x part", in the notation above
};

struct EstimateRow {
  int stage = 3;
  std::int64_t partition_numel = 0;  // part, as the engine's FlatLayout cuts it
  OffloadDevice offload_param = OffloadDevice::none;
  OffloadDevice offload_optimizer = OffloadDevice::none;
  std::int64_t per_gpu_bytes = 0;       // sum of the GPU terms
  std::int64_t per_node_cpu_bytes = 0;  // gpus_per_node * sum of the CPU terms
  std::int64_t nvme_bytes = 0;          // per node: gpus_per_node * sum of the NVMe terms
  std::int64_t pinned_bytes_per_rank = 0;
  std::vector<MemoryTerm> terms;
};

// Whether strata estimates this choice. Stages 0-2 have no parameter offload; stage 0 keeps the
// optimizer on the device; the optimizer goes to NVMe only at stage 3 (DeepSpeed's rules, which
// strata's configs follow). Offloading parameters needs the optimizer offloaded too (DeepSpeed's
// "parameter offload is only available with optimizer state offload", which the engine enforces).
// Returns an empty string when valid, else the reason.
std::string invalid_choice_reason(int stage, OffloadDevice offload_param,
                                  OffloadDevice offload_optimizer);

// One row: what one rank of the engine holds, term by term. The device side is the memory
// allocated for the whole run (activations, shards, gradient partition, optimizer states) plus
// the highest point of a training step: the engine's own parameter coordinator and gradient
// reducer run by its module passes on a device that only counts (gpu/counting), for two steps,
// the first recording the module trace. Asserts the choice is valid and the inputs positive.
EstimateRow estimate_row(const EstimateInputs& inputs, int stage, OffloadDevice offload_param,
                         OffloadDevice offload_optimizer);

// The device memory one rank's training step takes and gives back (the step terms of
// estimate_row, from the same counted step) at the step's highest point, and the largest single
// buffer the step allocates: what the engine reserves for its step before the first one.
struct StepDeviceMemory {
  std::int64_t peak_bytes = 0;
  std::int64_t largest_buffer_bytes = 0;
};
StepDeviceMemory step_device_memory(const EstimateInputs& inputs, int stage,
                                    OffloadDevice offload_param, OffloadDevice offload_optimizer);

// Every valid row: stage 0 (none/none), stage 1 and 2 (none/none, none/cpu), then stage 3
// (none/none, none/cpu, none/nvme, cpu/cpu, cpu/nvme, nvme/cpu, nvme/nvme).
std::vector<EstimateRow> estimate_all_rows(const EstimateInputs& inputs);

// DeepSpeed's estimate for the same row, from estimate_zero3_model_states_mem_needs (zero_init
// on, additional_buffer_factor 1.5) and estimate_zero2_model_states_mem_needs, with their
// float arithmetic and int() truncation. DeepSpeed's "per CPU" is per node. nullopt for the rows
// those functions do not cover (stages 0 and 1, anything on NVMe).
struct DeepSpeedEstimate {
  std::int64_t per_gpu_bytes = 0;
  std::int64_t per_node_cpu_bytes = 0;
};
std::optional<DeepSpeedEstimate> deepspeed_estimate(const EstimateInputs& inputs, int stage,
                                                    OffloadDevice offload_param,
                                                    OffloadDevice offload_optimizer);

// What one node of this machine offers, for the verdict.
struct MachineCapacity {
  std::optional<std::int64_t> gpu_bytes;        // the smallest GPU, or the configured budget
  std::string gpu_unknown_reason;               // why gpu_bytes is unknown
  std::int64_t cpu_bytes = 0;                   // RAM usable by the job
  std::optional<std::int64_t> nvme_free_bytes;  // free space at the swap path
  std::string nvme_path;
  // What a process may lock (gpu::PinnedLimit::lockable_bytes); nullopt = no limit.
  std::optional<std::int64_t> memlock_bytes;
};

struct FitVerdict {
  std::optional<bool> fits;  // nullopt: every known tier fits but the GPU's size is unknown
  std::string text;          // "fits", "needs 3.20 GiB more GPU memory; needs ..."
};

FitVerdict check_fit(const EstimateRow& row, const MachineCapacity& capacity);

}  // namespace strata::engine
