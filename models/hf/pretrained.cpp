#include "models/hf/pretrained.h"

#include <memory>
#include <vector>

#include "base/assert.h"
#include "models/hf/gpt2_weights.h"
#include "models/hf/hf_weights.h"

namespace strata::models {

GptShape gpt_shape(const HfConfig& config, std::int64_t seq_len, std::int64_t batch) {
  STRATA_ASSERT(config.model_type == "gpt2");
  STRATA_ASSERT(seq_len >= 1 && seq_len <= config.max_positions);
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

void load_pretrained(Gpt& gpt, const std::filesystem::path& folder) {
  std::vector<engine::ParamSpec> specs;
  for (engine::Module* module : gpt.modules())
    for (engine::ParamSpec& spec : module->parameters())
      specs.push_back(std::move(spec));
  gpt.set_pretrained(std::make_unique<Gpt2Weights>(HfWeights::open(folder), specs));
}

}  // namespace strata::models
