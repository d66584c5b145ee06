// The token tables and the logits padded to a multiple of 128 rows (models/vocab_padding.h), as
// llm.c pads GPT-2's 50,257 tokens to 50,304: the declared shapes, the logits' buffer, and padded
// rows that start at zero and are still exactly zero after training with weight decay.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/engine.h"
#include "gpu/comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "models/gpt/gpt.h"
#include "models/llama/llama.h"
#include "models/llama/rope_frequencies.h"
#include "models/model_plan.h"
#include "tests/engine/test_world.h"
#include "tests/models/host_engine.h"

namespace strata::models {
namespace {

using Shape = std::vector<std::int64_t>;

std::int64_t declared_numel(engine::Model& model) {
  std::int64_t count = 0;
  for (engine::Module* module : model.modules())
    for (const engine::ParamSpec& spec : module->parameters())
      count += spec.numel();
  return count;
}

LlamaShape llama_shape(std::int64_t vocab) {
  LlamaShape shape;
  shape.n_layer = 1;
  shape.n_head = 2;
  shape.n_kv_head = 1;
  shape.d_model = 16;
  shape.d_ff = 24;
  shape.seq_len = 4;
  shape.vocab = vocab;
  shape.batch = 2;
  shape.inv_freq = rope_inverse_frequencies(RopeConfig{}, shape.head_dim());
  return shape;
}

// GPT-2 124M: wte is [50304, 768], and the parameters are llm.c's num_parameters, 124,475,904
// (Hugging Face counts 124,439,808: 47 rows of 768 fewer).
TEST(VocabPadding, Gpt2sTokenTableHasLlmcsPaddedRows) {
  Gpt gpt(GptShape{12, 12, 768, 1024, 50257, 1});
  const engine::ParamSpec wte = gpt.modules()[0]->parameters()[0];
  EXPECT_EQ(wte.name, "wte");
  EXPECT_EQ(wte.shape, (Shape{50304, 768}));
  EXPECT_EQ(declared_numel(gpt), 124475904);
  EXPECT_EQ(gpt.shape().parameter_count(), 124475904);
}

// An untied Llama pads embed_tokens and lm_head alike; parameter_count() is what is declared.
TEST(VocabPadding, AnUntiedLlamaPadsBothTables) {
  Llama llama(llama_shape(200));
  const std::vector<engine::ParamSpec> embedding = llama.modules().front()->parameters();
  const std::vector<engine::ParamSpec> head = llama.modules().back()->parameters();
  ASSERT_EQ(head.size(), 2u);
  EXPECT_EQ(embedding[0].shape, (Shape{256, 16}));
  EXPECT_EQ(head[1].name, "lm_head.weight");
  EXPECT_EQ(head[1].shape, (Shape{256, 16}));
  EXPECT_EQ(declared_numel(llama), llama.shape().parameter_count());
}

// The logits are (rows, padded vocab): a vocabulary of 80 or of 200 takes the activation memory of
// 128 or of 256.
TEST(VocabPadding, TheLogitsHaveAColumnPerPaddedRow) {
  for (const gpu::DataType type : {gpu::DataType::float32, gpu::DataType::bfloat16}) {
    EXPECT_EQ(Gpt(GptShape{1, 2, 16, 8, 80, 2}).activation_bytes(false, type),
              Gpt(GptShape{1, 2, 16, 8, 128, 2}).activation_bytes(false, type));
    EXPECT_EQ(Llama(llama_shape(200)).activation_bytes(false, type),
              Llama(llama_shape(256)).activation_bytes(false, type));
    EXPECT_LT(Llama(llama_shape(256)).activation_bytes(false, type),
              Llama(llama_shape(257)).activation_bytes(false, type));
  }
}

// A GPT of 80 tokens (wte [128, 16]) trained 4 AdamW steps with weight decay under `zero`: the
// masters, in declaration order, wte first.
std::vector<float> trained_masters(const std::string& zero) {
  const engine::Config config =
      engine::parse_config_text(fmt::format(R"({{"train_micro_batch_size_per_gpu": 2,
            "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-2, "weight_decay": 0.1}}}},
            "zero_optimization": {},
            "strata": {{"model": {{"n_layer": 1, "n_head": 2, "d_model": 16, "seq_len": 8,
                                   "vocab": 80}}, "seed": 3}}}})",
                                            zero),
                                "padded vocabulary config")
          .config;
  testing::HostEngine run(config, 2);
  std::vector<std::int32_t> inputs(16), targets(16);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = static_cast<std::int32_t>(i * 11 % 80);
    targets[i] = static_cast<std::int32_t>((i * 11 + 79) % 80);
  }
  for (int step = 0; step < 4; ++step)
    static_cast<void>(run.engine.train_batch(inputs, targets));
  return run.engine.master_parameters();
}

// The embedding reads no padded row and the classifier gives the padded logits a zero gradient,
// so each padded row's update, weight decay included, is zero: on the device's Adam (stage 0) and
// on the CPU's (stage 2, optimizer offloaded).
TEST(VocabPadding, PaddedRowsAreStillExactlyZeroAfterTraining) {
  for (const std::string zero :
       {R"({"stage": 0})", R"({"stage": 2, "offload_optimizer": {"device": "cpu"}})"}) {
    const std::vector<float> masters = trained_masters(zero);
    ASSERT_GT(masters.size(), 128u * 16);
    std::int64_t trained_nonzero = 0, padded_nonzero = 0;
    for (std::size_t i = 0; i < 80 * 16; ++i)
      trained_nonzero += masters[i] != 0.0f;
    for (std::size_t i = 80 * 16; i < 128 * 16; ++i)
      padded_nonzero += masters[i] != 0.0f;
    EXPECT_EQ(trained_nonzero, 80 * 16) << zero;
    EXPECT_EQ(padded_nonzero, 0) << zero;
  }
}

}  // namespace
}  // namespace strata::models
