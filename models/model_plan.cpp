#include "models/model_plan.h"

#include <fmt/format.h>

#include "base/error.h"
#include "base/units.h"
#include "models/gpt/gpt.h"
#include "models/hf/hf_config.h"
#include "models/hf/hf_weights.h"
#include "models/hf/pretrained_weights.h"
#include "models/llama/llama.h"
#include "models/llama/rope_frequencies.h"

namespace strata::models {
namespace {

LlamaShape llama_shape(const HfConfig& config, std::int64_t seq_len, std::int64_t batch) {
  LlamaShape shape;
  shape.n_layer = config.n_layer;
  shape.n_head = config.n_head;
  shape.n_kv_head = config.n_kv_head;
  shape.d_model = config.d_model;
  shape.d_ff = config.d_ff;
  shape.seq_len = seq_len;
  shape.vocab = config.vocab;
  shape.batch = batch;
  shape.rms_norm_eps = config.norm_eps;
  shape.tied_head = config.tie_word_embeddings;
  shape.qkv_bias = config.qkv_bias;
  shape.inv_freq = rope_inverse_frequencies(config.rope, shape.head_dim());
  return shape;
}

GptShape gpt2_shape(const HfConfig& config, std::int64_t seq_len, std::int64_t batch) {
  GptShape shape;
  shape.n_layer = config.n_layer;
  shape.n_head = config.n_head;
  shape.d_model = config.d_model;
  shape.seq_len = seq_len;
  shape.vocab = config.vocab;
  shape.batch = batch;
  shape.positions = config.max_positions;
  return shape;
}

// Every parameter the model declares, in declaration order across modules.
std::vector<engine::ParamSpec> declared(engine::Model& model) {
  std::vector<engine::ParamSpec> specs;
  for (engine::Module* module : model.modules())
    for (engine::ParamSpec& spec : module->parameters())
      specs.push_back(std::move(spec));
  return specs;
}

}  // namespace

std::string ModelPlan::summary() const {
  const std::string count = base::format_count(static_cast<double>(parameter_count()));
  // The count includes the token tables' padded rows: say so wherever there are any.
  const std::string padded =
      padded_vocab() == vocab() ? "" : fmt::format(" (padded to {})", padded_vocab());
  if (gpt) {
    return fmt::format(
        "{}, {} parameters (n_layer {}, n_head {}, d_model {}, seq_len {}, vocab {}{})",
        architecture, count, gpt->n_layer, gpt->n_head, gpt->d_model, gpt->seq_len, gpt->vocab,
        padded);
  }
  return fmt::format(
      "{}, {} parameters ({} layers, {} heads of which {} for k/v, hidden {}, MLP {}, seq_len "
      "{}, vocab {}{}, {} head)",
      architecture, count, llama->n_layer, llama->n_head, llama->n_kv_head, llama->d_model,
      llama->d_ff, llama->seq_len, llama->vocab, padded, llama->tied_head ? "tied" : "untied");
}

ModelPlan plan_model(const engine::ModelConfig& model, std::int64_t micro_batch) {
  ModelPlan plan;
  plan.from_pretrained = model.from_pretrained;
  if (model.hf_config.empty()) {
    if (model.n_layer < 1 || model.n_head < 1 || model.d_model < 1 || model.seq_len < 1) {
      throw UserError("strata.model needs n_layer, n_head, d_model and seq_len of at least 1",
                      "set positive values under \"strata\": {\"model\": {...}}", 2);
    }
    plan.architecture = "GPT";
    plan.gpt = GptShape{model.n_layer, model.n_head, model.d_model,
                        model.seq_len, model.vocab,  micro_batch};
    return plan;
  }
  const HfConfig config = read_hf_config(model.hf_config);
  plan.architecture = config.is_gpt2() ? "GPT-2" : config.model_type;
  if (model.seq_len > config.max_positions) {
    throw UserError(fmt::format("strata.model.seq_len {} is past the model's context of {} "
                                "positions ({})",
                                model.seq_len, config.max_positions, config.path.string()),
                    fmt::format("set \"seq_len\" to {} or less", config.max_positions), 2);
  }
  if (config.sliding_window > 0 && model.seq_len > config.sliding_window) {
    throw UserError(
        fmt::format("strata.model.seq_len {} is past the sliding_window of {} that {} sets: "
                    "strata computes full causal attention, the same only within the window",
                    model.seq_len, config.sliding_window, config.path.string()),
        fmt::format("set \"seq_len\" to {} or less", config.sliding_window), 2);
  }
  if (config.is_gpt2()) {
    plan.gpt = gpt2_shape(config, model.seq_len, micro_batch);
  } else {
    plan.llama = llama_shape(config, model.seq_len, micro_batch);
  }
  return plan;
}

std::unique_ptr<engine::Model> build_model(const ModelPlan& plan) {
  if (plan.gpt) {
    auto gpt = std::make_unique<Gpt>(*plan.gpt);
    if (!plan.from_pretrained.empty()) {
      gpt->set_pretrained(std::make_unique<PretrainedWeights>(HfWeights::open(plan.from_pretrained),
                                                              declared(*gpt), gpt2_naming()));
    }
    return gpt;
  }
  auto llama = std::make_unique<Llama>(*plan.llama);
  if (!plan.from_pretrained.empty()) {
    llama->set_pretrained(std::make_unique<PretrainedWeights>(HfWeights::open(plan.from_pretrained),
                                                              declared(*llama), llama_naming()));
  }
  return llama;
}

}  // namespace strata::models
