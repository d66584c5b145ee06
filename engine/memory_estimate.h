#pragma once

// strata's own prediction of its memory use per tier (GPU, CPU RAM, NVMe), term by term, for one
// ZeRO stage and one offload choice. The engine is held to these numbers: each term names one
// buffer (or one set of buffers) the engine allocates, and docs/estimate.md gives its formula and
// why it differs from DeepSpeed's estimators.
//
// Notation used in the comments: P = parameters, L = parameters of the largest module,
// W = ranks (gpus_per_node * nodes), part = ceil(P / W), the elements of one rank's flat
// partition (the last rank's is padded up to the same size).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/config.h"

namespace strata::engine {

// The shape of the built-in GPT-2 style decoder: pre-LayerNorm blocks, learned positions, tied
// input/output embeddings, biases everywhere.
struct GptShape {
  std::int64_t n_layer = 0;
  std::int64_t n_head = 0;
  std::int64_t d_model = 0;
  std::int64_t seq_len = 0;
  std::int64_t vocab = 0;
};

// The element counts of every parameter tensor of the GPT, in declaration order: wte, wpe, then
// per block ln1.weight, ln1.bias, attn.qkv.weight, attn.qkv.bias, attn.proj.weight,
// attn.proj.bias, ln2.weight, ln2.bias, mlp.fc.weight, mlp.fc.bias, mlp.proj.weight,
// mlp.proj.bias, then lnf.weight, lnf.bias.
std::vector<std::int64_t> gpt_tensor_elements(const GptShape& shape);

// vocab*d + seq_len*d + n_layer*(12 d^2 + 13 d) + 2 d.
std::int64_t gpt_param_count(const GptShape& shape);

// The largest module: the embedding (wte + wpe, vocab*d + seq_len*d) or one block (12 d^2 + 13 d).
std::int64_t gpt_largest_module_params(const GptShape& shape);

// Everything the estimate reads. The defaults are DeepSpeed's (a config without these keys).
struct EstimateInputs {
  std::int64_t params = 0;                // P
  std::int64_t largest_layer_params = 0;  // L
  std::int64_t gpus_per_node = 1;
  std::int64_t nodes = 1;

  // zero_optimization, in elements
  std::int64_t reduce_bucket_size = 500'000'000;
  std::optional<bool> overlap_comm;  // nullopt: DeepSpeed's default, true iff stage 3
  std::int64_t stage3_prefetch_bucket_size = 50'000'000;
  std::int64_t stage3_max_live_parameters = 1'000'000'000;
  std::int64_t stage3_param_persistence_threshold = 100'000;
  std::int64_t stage3_model_persistence_threshold = INT64_MAX;
  std::int64_t sub_group_size = 1'000'000'000;
  // offload_param
  std::int64_t param_buffer_count = 5;
  std::int64_t param_buffer_size = 100'000'000;  // elements
  std::int64_t max_in_cpu = 1'000'000'000;       // elements
  bool param_pin_memory = true;
  // offload_optimizer
  std::int64_t optimizer_buffer_count = 4;
  bool optimizer_pin_memory = true;
  bool pipeline_read = false;
  bool pipeline_write = false;
  // aio
  std::int64_t aio_block_size_bytes = 1'048'576;

  // Known only with --model: the module sizes (layout, persistent params) and activations.
  std::optional<GptShape> model;
  std::int64_t micro_batch = 1;  // train_micro_batch_size_per_gpu
  // As the engine decides it: activation_checkpointing.partition_activations or
  // number_checkpoints > 0.
  bool activation_checkpointing = false;
  // The model's own activation memory for one micro-batch (models/ sizes it; engine/ cannot
  // include models/, so the caller fills it in). No term when unknown.
  std::optional<std::int64_t> activation_bytes;

  std::int64_t world_size() const { return gpus_per_node * nodes; }
};

// Fills the inputs from a loaded config (its zero_optimization, offload_*, aio, batch and
// strata.model sections). `params` and `largest_layer_params` come from the caller; with
// `use_model`, they are replaced by the counts of config.strata.model and the shape is kept for
// activations and persistent params.
EstimateInputs estimate_inputs_from_config(const Config& config, std::int64_t params,
                                           std::int64_t largest_layer_params,
                                           std::int64_t gpus_per_node, std::int64_t nodes,
                                           bool use_model);

enum class Tier { gpu, cpu, nvme };

const char* to_string(Tier tier);

// One buffer (or set of buffers) of one rank.
struct MemoryTerm {
  std::string name;  // "optimizer_states", "gathered_params", ...
  Tier tier = Tier::gpu;
  std::int64_t bytes = 0;  // per rank
  bool pinned = false;     // page-locked CPU memory (counts against RLIMIT_MEMLOCK)
  std::string formula;     // "12 * part", in the notation above
};

struct EstimateRow {
  int stage = 3;
  OffloadDevice offload_param = OffloadDevice::none;
  OffloadDevice offload_optimizer = OffloadDevice::none;
  std::int64_t per_gpu_bytes = 0;       // sum of the GPU terms
  std::int64_t per_node_cpu_bytes = 0;  // gpus_per_node * sum of the CPU terms
  std::int64_t nvme_bytes = 0;          // per node: gpus_per_node * sum of the NVMe terms
  std::int64_t pinned_bytes_per_rank = 0;
  std::vector<MemoryTerm> terms;
};

// Whether strata runs this choice. Stage 2 has no parameter offload and keeps the optimizer on the
// GPU or in CPU RAM (NVMe optimizer swapping exists only with stage 3, as in DeepSpeed). Stage 3
// offloads parameters only together with the optimizer (DeepSpeed's rule: "parameter offload is
// only available with optimizer state offload"). Stages other than 2 and 3 are not estimated.
// Returns an empty string when valid, else the reason.
std::string invalid_choice_reason(int stage, OffloadDevice offload_param,
                                  OffloadDevice offload_optimizer);

// One row. Asserts the choice is valid and the inputs are positive.
EstimateRow estimate_row(const EstimateInputs& inputs, int stage, OffloadDevice offload_param,
                         OffloadDevice offload_optimizer);

// Every valid row: stage 2 (none/none, none/cpu), then stage 3 (none/none, none/cpu, none/nvme,
// cpu/cpu, cpu/nvme, nvme/cpu, nvme/nvme).
std::vector<EstimateRow> estimate_all_rows(const EstimateInputs& inputs);

// DeepSpeed's estimate for the same row, from estimate_zero3_model_states_mem_needs (zero_init
// on, additional_buffer_factor 1.5) and estimate_zero2_model_states_mem_needs, with their
// float arithmetic and int() truncation. DeepSpeed's "per CPU" is per node. nullopt for the rows
// those functions do not cover (anything on NVMe).
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
  std::optional<std::int64_t> memlock_bytes;  // RLIMIT_MEMLOCK per process; nullopt = no limit
};

struct FitVerdict {
  std::optional<bool> fits;  // nullopt: every known tier fits but the GPU's size is unknown
  std::string text;          // "fits", "needs 3.20 GiB more GPU memory; needs ..."
};

FitVerdict check_fit(const EstimateRow& row, const MachineCapacity& capacity);

}  // namespace strata::engine
