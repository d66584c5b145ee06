// The memory estimate: strata's terms on hand-computed cases (the engine's buffers, and the step's
// peak counted module by module), the GPT shape arithmetic, DeepSpeed's
// estimator formulas (values worked by hand with Python's float arithmetic), and the verdicts.
#include <gtest/gtest.h>

#include <string>

#include "engine/memory_estimate.h"
#include "models/gpt/gpt.h"
#include "models/model_plan.h"

namespace strata::engine {
namespace {

using enum OffloadDevice;

const MemoryTerm* find_term(const EstimateRow& row, const std::string& name) {
  for (const MemoryTerm& term : row.terms) {
    if (term.name == name) return &term;
  }
  return nullptr;
}

std::int64_t term_bytes(const EstimateRow& row, const std::string& name) {
  const MemoryTerm* term = find_term(row, name);
  return term == nullptr ? 0 : term->bytes;
}

// P = 8,192,000 in modules of L = 1,000,000 on 4 ranks.
EstimateInputs small_inputs() {
  EstimateInputs inputs;
  inputs.params = 8'192'000;
  inputs.largest_layer_params = 1'000'000;
  inputs.gpus_per_node = 4;
  return inputs;
}

TEST(EstimateChoices, FollowDeepSpeedsRules) {
  EXPECT_EQ(invalid_choice_reason(3, nvme, nvme), "");
  EXPECT_EQ(invalid_choice_reason(3, none, nvme), "");
  EXPECT_EQ(invalid_choice_reason(2, none, cpu), "");
  EXPECT_EQ(invalid_choice_reason(1, none, cpu), "");
  EXPECT_EQ(invalid_choice_reason(0, none, none), "");
  EXPECT_EQ(invalid_choice_reason(2, cpu, cpu), "offload_param needs ZeRO stage 3");
  EXPECT_EQ(invalid_choice_reason(2, none, nvme), "offload_optimizer nvme needs ZeRO stage 3");
  EXPECT_EQ(invalid_choice_reason(0, none, cpu), "offload_optimizer needs ZeRO stage 1, 2 or 3");
  EXPECT_EQ(invalid_choice_reason(3, cpu, none),
            "offload_param needs offload_optimizer cpu or nvme");
  EXPECT_NE(invalid_choice_reason(4, none, none), "");
}

TEST(EstimateRows, TwelveRowsInOrder) {
  std::vector<EstimateRow> rows = estimate_all_rows(small_inputs());
  ASSERT_EQ(rows.size(), 12u);
  EXPECT_EQ(rows[0].stage, 0);
  EXPECT_EQ(rows[1].stage, 1);
  EXPECT_EQ(rows[2].offload_optimizer, cpu);
  EXPECT_EQ(rows[3].stage, 2);
  EXPECT_EQ(rows[4].offload_optimizer, cpu);
  EXPECT_EQ(rows[5].stage, 3);
  EXPECT_EQ(rows[5].offload_param, none);
  EXPECT_EQ(rows[11].offload_param, nvme);
  EXPECT_EQ(rows[11].offload_optimizer, nvme);
}

// small_inputs() without a model shape: P cut into 8 modules of L = 1,000,000 and one of 192,000.
// On 4 ranks a module of 1e6 has shards of round_up(250,000, 2048) = 251,904 (padded 1,007,616),
// the last one 49,152 (padded 196,608): part = 8 x 251,904 + 49,152 = 2,064,384.
constexpr std::int64_t kPart = 2'064'384;
constexpr std::int64_t kPadded = 1'007'616;
constexpr std::int64_t kLastPadded = 196'608;

TEST(EstimateRows, Stage3NoOffloadByHand) {
  EstimateRow row = estimate_row(small_inputs(), 3, none, none);
  EXPECT_EQ(row.partition_numel, kPart);
  EXPECT_EQ(term_bytes(row, "param_shards"), 2 * kPart);  // bf16 assumed without a config
  EXPECT_EQ(term_bytes(row, "gradient_partition_fp32"), 4 * kPart);
  EXPECT_EQ(term_bytes(row, "optimizer_states_fp32"), 12 * kPart);
  EXPECT_EQ(term_bytes(row, "losses_and_grad_norm"), 4 + 16);
  // The second step follows the trace: every module is reused within stage3_max_reuse_distance
  // (1e9) of its forward, so all stay gathered until their backward; the peak is module 7's
  // backward, modules 0-7 gathered in bf16, the type the ops compute in (module 8 was released
  // after its backward), and module 7's fp32 gradient buffer.
  EXPECT_EQ(term_bytes(row, "gathered_params"), 2 * 8 * kPadded);
  EXPECT_NE(find_term(row, "gathered_params")->formula.find("modules 0-7"), std::string::npos);
  EXPECT_EQ(term_bytes(row, "module_gradients_fp32"), 4 * kPadded);
  EXPECT_EQ(find_term(row, "gradient_shard_fp32"), nullptr);
  EXPECT_EQ(row.per_gpu_bytes, 18 * kPart + 20 + 2 * 8 * kPadded + 4 * kPadded);
  // The losses' and the norm's pinned pages
  EXPECT_EQ(row.per_node_cpu_bytes, 4 * 8192);
  EXPECT_EQ(row.pinned_bytes_per_rank, 8192);
  EXPECT_EQ(row.nvme_bytes, 0);
  EXPECT_EQ(find_term(row, "activations"), nullptr);  // unknown without the model's shape
}

TEST(EstimateRows, Stage3WithoutReuseHoldsOneModuleAndItsGradients) {
  EstimateInputs inputs = small_inputs();
  inputs.stage3_max_reuse_distance = 0;
  EstimateRow row = estimate_row(inputs, 3, none, none);
  // A module's backward: its gathered bf16 parameters and its fp32 gradient buffer.
  EXPECT_EQ(term_bytes(row, "gathered_params"), 2 * kPadded);
  EXPECT_EQ(term_bytes(row, "module_gradients_fp32"), 4 * kPadded);
}

TEST(EstimateRows, Stage2KeepsEverythingGatheredAndPacksBigBuckets) {
  EstimateInputs inputs = small_inputs();
  inputs.reduce_bucket_size = 1000;  // 250 elements per rank: every module is packed
  EstimateRow row = estimate_row(inputs, 2, none, none);
  // Module 7's reduction: all modules gathered, its gradients, its shard and the bucket.
  EXPECT_EQ(term_bytes(row, "gathered_params"), 2 * (8 * kPadded + kLastPadded));
  EXPECT_EQ(term_bytes(row, "module_gradients_fp32"), 4 * kPadded);
  EXPECT_EQ(term_bytes(row, "gradient_shard_fp32"), 4 * kPadded / 4);
  EXPECT_EQ(term_bytes(row, "gradient_bucket_fp32"), 4 * 1000);
  EXPECT_EQ(find_term(row, "gradient_buffers_fp32"), nullptr);  // stage 2 frees them
}

TEST(EstimateRows, Stage0IsUnshardedWhateverTheWorld) {
  EstimateRow row = estimate_row(small_inputs(), 0, none, none);
  // One rank's layout: modules of round_up(1e6, 2048) = 1,001,472 and 192,512.
  const std::int64_t part = 8 * 1'001'472 + 192'512;
  EXPECT_EQ(row.partition_numel, part);
  EXPECT_EQ(term_bytes(row, "gradient_buffers_fp32"), 4 * part);
  // The device tier holds every whole module in bf16 and lends it: nothing is gathered.
  EXPECT_EQ(find_term(row, "gathered_params"), nullptr);
  EXPECT_EQ(row.per_gpu_bytes, (2 + 4 + 12 + 4) * part + 20);
}

TEST(EstimateRows, Fp32StorageGathersInFp32) {
  EstimateInputs inputs = small_inputs();
  inputs.storage_bytes = 4;
  EstimateRow row = estimate_row(inputs, 1, none, none);
  EXPECT_EQ(term_bytes(row, "param_shards"), 4 * kPart);
  EXPECT_EQ(term_bytes(row, "gathered_params"), 4 * (8 * kPadded + kLastPadded));
  EXPECT_EQ(term_bytes(row, "gradient_buffers_fp32"), 4 * (8 * kPadded + kLastPadded));
}

TEST(EstimateRows, Stage3EverythingOnNvmeByHand) {
  EstimateInputs inputs = small_inputs();
  inputs.max_in_cpu = 0;
  EstimateRow row = estimate_row(inputs, 3, nvme, nvme);
  // The step's peak, as above, and each of the 9 modules' sum of squares (8 bytes).
  EXPECT_EQ(row.per_gpu_bytes, 20 + 2 * 8 * kPadded + 4 * kPadded + 8 * 9);
  EXPECT_EQ(term_bytes(row, "param_staging"), 2 * kPart);
  // Pools: 5 x the largest bf16 shard (503,808 bytes, a 4 KiB multiple); 4 x the one sub-group's
  // [master | exp_avg | exp_avg_sq] extent, 3 x 8,257,536 bytes.
  EXPECT_EQ(term_bytes(row, "param_swap_buffers"), 5 * 503'808);
  EXPECT_EQ(term_bytes(row, "optimizer_swap_buffers"), 4 * 3 * 4 * kPart);
  // The gradients are in their swap file: CPU memory holds two pieces of sums (one written behind
  // the other), the staging ring of three pieces, and one sub-group of them. A piece is the
  // largest shard here (under 4 Mi elements).
  EXPECT_EQ(find_term(row, "gradient_partition_fp32"), nullptr);
  EXPECT_EQ(term_bytes(row, "gradient_accumulation_fp32"), 2 * 4 * 251'904);
  EXPECT_EQ(term_bytes(row, "gradient_staging_fp32"), 3 * 4 * 251'904);
  EXPECT_EQ(term_bytes(row, "gradient_read_fp32"), 4 * kPart);
  const std::int64_t per_rank_cpu =
      2 * kPart + 5 * 503'808 + 4 * 3 * 4 * kPart + 5 * 4 * 251'904 + 4 * kPart + 12288;
  EXPECT_EQ(row.per_node_cpu_bytes, 4 * per_rank_cpu);
  // pin_memory defaults to true, as DeepSpeed's: both pools and the gradient buffer are
  // page-locked, beside the step's three pages (losses, the norm, the modules' sums of squares).
  EXPECT_EQ(row.pinned_bytes_per_rank, 5 * 503'808 + 4 * 3 * 4 * kPart + 5 * 4 * 251'904 + 12288);
  // Turned off, only those three pages are; the sizes do not change.
  inputs.param_pin_memory = false;
  inputs.optimizer_pin_memory = false;
  const EstimateRow unpinned = estimate_row(inputs, 3, nvme, nvme);
  EXPECT_EQ(unpinned.pinned_bytes_per_rank, 12288);
  EXPECT_EQ(unpinned.per_node_cpu_bytes, row.per_node_cpu_bytes);
  // NVMe: every module's bf16 shard as its own extent, the optimizer's extent, the gradients.
  EXPECT_EQ(term_bytes(row, "param_shards"), 2 * kPart);
  EXPECT_EQ(find_term(row, "param_shards")->tier, Tier::nvme);
  EXPECT_EQ(term_bytes(row, "gradients_fp32"), 4 * kPart);
  EXPECT_EQ(row.nvme_bytes, 4 * (2 * kPart + 12 * kPart + 4 * kPart));
}

TEST(EstimateRows, MaxInCpuKeepsModulesInCpuMemory) {
  EstimateInputs inputs = small_inputs();
  inputs.max_in_cpu = 600'000;  // modules 0 and 1 (251,904 each) fit, module 8 (49,152) too
  EstimateRow row = estimate_row(inputs, 3, nvme, cpu);
  EXPECT_EQ(term_bytes(row, "param_shards"), 2 * 6 * 251'904);
  inputs.max_in_cpu = kPart;  // everything: no pool, no swap file
  row = estimate_row(inputs, 3, nvme, cpu);
  EXPECT_EQ(find_term(row, "param_shards"), nullptr);
  EXPECT_EQ(find_term(row, "param_swap_buffers"), nullptr);
  EXPECT_EQ(row.nvme_bytes, 0);
}

TEST(EstimateRows, SubGroupsPadEachExtentAndSizeThePool) {
  EstimateInputs inputs = small_inputs();
  inputs.sub_group_size = 1'000'000;
  EstimateRow row = estimate_row(inputs, 3, none, nvme);
  // 2,064,384 elements in sub-groups of 999,424 (1e6 rounded down to 2048): 999,424 x 2 + 65,536;
  // each region of an extent is 4 KiB-rounded (already here): 3 x 3,997,696 per full group.
  EXPECT_EQ(term_bytes(row, "optimizer_states_fp32"), 3 * 4 * kPart);
  EXPECT_EQ(term_bytes(row, "optimizer_swap_buffers"), 4 * 3 * 3'997'696);
  inputs.optimizer_moments = 1;  // Adagrad or Lion: master and one state
  row = estimate_row(inputs, 3, none, nvme);
  EXPECT_EQ(term_bytes(row, "optimizer_swap_buffers"), 4 * 2 * 3'997'696);
  EXPECT_EQ(term_bytes(row, "optimizer_states_fp32"), 2 * 4 * kPart);
}

TEST(EstimateRows, Stage2OptimizerOnCpuByHand) {
  EstimateInputs inputs = small_inputs();
  inputs.optimizer_pin_memory = true;
  EstimateRow row = estimate_row(inputs, 2, none, cpu);
  EXPECT_EQ(term_bytes(row, "param_shards"), 2 * kPart);
  EXPECT_EQ(find_term(row, "gradient_partition_fp32")->tier, Tier::cpu);
  // CPU: the two staging slots of the 16-bit parameters the optimizer writes (one uploading while
  // the next is made), gradients, their staging ring of three shards, states, pinned pages.
  EXPECT_EQ(row.per_node_cpu_bytes,
            4 * (2 * 2 * kPart + 4 * kPart + 3 * 4 * 251'904 + 12 * kPart + 12288));
  // offload_optimizer.pin_memory page-locks the gradients, their staging and the states, as
  // DeepSpeed pins its CPU fp32 partitions, and the parameters' staging, so that their uploads
  // are DMAs beside the optimizer.
  EXPECT_EQ(row.pinned_bytes_per_rank,
            2 * 2 * kPart + 4 * kPart + 3 * 4 * 251'904 + 12 * kPart + 12288);
}

// The memory the tiers keep in CPU is page-locked as its own section's pin_memory says: the
// parameters' shards by offload_param's, the optimizer's states by offload_optimizer's.
TEST(EstimateRows, CpuTiersArePinnedAsTheirSectionsSay) {
  EstimateInputs inputs = small_inputs();
  EstimateRow row = estimate_row(inputs, 3, cpu, cpu);
  EXPECT_TRUE(find_term(row, "param_host_partition")->pinned);
  EXPECT_TRUE(find_term(row, "optimizer_states_fp32")->pinned);
  inputs.param_pin_memory = false;
  row = estimate_row(inputs, 3, cpu, cpu);
  EXPECT_FALSE(find_term(row, "param_host_partition")->pinned);
  EXPECT_TRUE(find_term(row, "optimizer_states_fp32")->pinned);
  inputs.optimizer_pin_memory = false;
  EXPECT_EQ(estimate_row(inputs, 3, cpu, cpu).pinned_bytes_per_rank, 12288);  // the step's pages
}

// n_layer 1, d 64, vocab 256, seq 32 on 2 ranks, as engine/zero's FlatLayout cuts it:
// embedding 18,432 -> shards of 10,240 (padded 20,480); block 49,984 -> 26,624 (53,248);
// ln_f 128 -> 2,048 (4,096). Partition 38,912.
TEST(EstimateRows, ModelShapeUsesTheEnginesFlatLayout) {
  EstimateInputs inputs;
  models::Gpt gpt(models::GptShape{1, 4, 64, 32, 256, 1});
  set_model(inputs, declare(gpt));
  inputs.gpus_per_node = 2;
  inputs.stage3_param_persistence_threshold = 200;  // only ln_f (128) stays gathered
  inputs.stage3_max_reuse_distance = 0;
  EstimateRow row = estimate_row(inputs, 3, none, none);
  EXPECT_EQ(row.partition_numel, 38'912);
  EXPECT_EQ(term_bytes(row, "param_shards"), 2 * 38'912);
  // The block's backward: the block and the persistent head gathered; the block's gradients and
  // the embedding's, made at the head's backward (the head borrows wte) and reduced at its own.
  EXPECT_EQ(term_bytes(row, "gathered_params"), 2 * (53'248 + 4'096));
  EXPECT_EQ(term_bytes(row, "module_gradients_fp32"), 4 * (20'480 + 53'248));
  EXPECT_NE(find_term(row, "module_gradients_fp32")->formula.find("modules 0-1"),
            std::string::npos);
  EXPECT_EQ(find_term(row, "activations"), nullptr);  // the caller sizes them (models/)
  inputs.activation_bytes = 123'456;
  EXPECT_EQ(term_bytes(estimate_row(inputs, 3, none, none), "activations"), 123'456);
}

TEST(EstimateRows, MaxLiveParametersEvictsKeptModules) {
  EstimateInputs inputs = small_inputs();
  inputs.stage3_max_live_parameters = 3 * kPadded;
  EstimateRow row = estimate_row(inputs, 3, none, none);
  // Modules kept for reuse are dropped to make room: at most three live at once.
  EXPECT_LE(term_bytes(row, "gathered_params"), 2 * 3 * kPadded);
  EXPECT_GE(term_bytes(row, "gathered_params"), 2 * 2 * kPadded);
}

TEST(EstimateInputsFromConfig, ReadsTheSections) {
  Config config = default_config();
  config.zero.reduce_bucket_size = 123;
  config.zero.sub_group_size = 4096;
  config.zero.stage3_max_reuse_distance = 77;
  config.zero.offload_param.buffer_count = 7;
  config.zero.offload_param.max_in_cpu = 66;
  config.batch.train_micro_batch_size_per_gpu = 4;
  config.batch.gradient_accumulation_steps = 3;
  config.activation_checkpointing.number_checkpoints = 2;
  config.strata.model = {2, 4, 64, 32, 256, "", "", 0};
  EstimateInputs plain = estimate_inputs_from_config(config, 1000, 10, 8, 2);
  EXPECT_EQ(plain.params, 1000);
  EXPECT_EQ(plain.largest_layer_params, 10);
  EXPECT_EQ(plain.world_size(), 16);
  EXPECT_EQ(plain.storage_bytes, 4);  // neither bf16 nor fp16: the engine keeps fp32
  EXPECT_EQ(plain.optimizer_moments, 2);
  EXPECT_EQ(plain.gradient_accumulation_steps, 3);
  EXPECT_EQ(plain.reduce_bucket_size, 123);
  EXPECT_EQ(plain.stage3_max_reuse_distance, 77);
  EXPECT_EQ(plain.sub_group_size, 4096);
  EXPECT_EQ(plain.param_buffer_count, 7);
  EXPECT_EQ(plain.max_in_cpu, 66);
  EXPECT_EQ(plain.optimizer_buffer_count, 4);
  EXPECT_EQ(plain.micro_batch, 4);
  EXPECT_TRUE(plain.activation_checkpointing);  // number_checkpoints > 0, as the engine reads it
  EXPECT_FALSE(plain.activation_bytes.has_value());
  EXPECT_FALSE(plain.model.has_value());
  config.bf16.enabled = true;
  config.optimizer.type = OptimizerType::lion;
  EstimateInputs modelled = estimate_inputs_from_config(config, 0, 0, 1, 1);
  models::Gpt gpt(models::GptShape{2, 4, 64, 32, 256, 4});
  set_model(modelled, declare(gpt));
  ASSERT_TRUE(modelled.model.has_value());
  EXPECT_EQ(modelled.storage_bytes, 2);
  EXPECT_EQ(modelled.optimizer_moments, 1);
  EXPECT_EQ(modelled.params, models::GptShape({2, 4, 64, 32, 256, 4}).parameter_count());
  EXPECT_EQ(modelled.largest_layer_params, 12 * 64 * 64 + 13 * 64);
}

// DeepSpeed's documented example (docs/code-docs/source/memory.rst): 2851M params, 32M largest
// layer, 1 node of 8 GPUs; the docs print 71.69 / 0.12, 63.72 / 0.78, 1.43 / 6.09 GB (GiB) for
// ZeRO-3 and 127.45 / 5.31, 127.45 / 15.93 for ZeRO-2.
TEST(DeepSpeedEstimate, MatchesTheDocumentedExample) {
  EstimateInputs inputs;
  inputs.params = 2'851'000'000;
  inputs.largest_layer_params = 32'000'000;
  inputs.gpus_per_node = 8;
  auto z3_cc = deepspeed_estimate(inputs, 3, cpu, cpu);
  ASSERT_TRUE(z3_cc);
  EXPECT_EQ(z3_cc->per_gpu_bytes, 128'000'000);          // 4L
  EXPECT_EQ(z3_cc->per_node_cpu_bytes, 76'977'000'000);  // P*18*1*1.5
  auto z3_nc = deepspeed_estimate(inputs, 3, none, cpu);
  EXPECT_EQ(z3_nc->per_gpu_bytes, 128'000'000 + 712'750'000);  // 4L + int(2P/8)
  EXPECT_EQ(z3_nc->per_node_cpu_bytes, 68'424'000'000);        // P*16*1*1.5
  auto z3_nn = deepspeed_estimate(inputs, 3, none, none);
  EXPECT_EQ(z3_nn->per_gpu_bytes, 128'000'000 + 6'414'750'000);  // 4L + int(18P/8)
  EXPECT_EQ(z3_nn->per_node_cpu_bytes, 1'536'000'000);           // L*4*8*1.5
  auto z2_c = deepspeed_estimate(inputs, 2, none, cpu);
  EXPECT_EQ(z2_c->per_gpu_bytes, 5'702'000'000);         // 2P
  EXPECT_EQ(z2_c->per_node_cpu_bytes, 136'848'000'000);  // P*max(32,16)*1.5
  auto z2_n = deepspeed_estimate(inputs, 2, none, none);
  EXPECT_EQ(z2_n->per_gpu_bytes, 17'106'000'000);        // 4P + int(16P/8)
  EXPECT_EQ(z2_n->per_node_cpu_bytes, 136'848'000'000);  // P*4*8*1.5
  auto gib = [](std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); };
  EXPECT_NEAR(gib(z3_cc->per_node_cpu_bytes), 71.69, 0.005);
  EXPECT_NEAR(gib(z3_nn->per_gpu_bytes), 6.09, 0.005);
  EXPECT_NEAR(gib(z2_n->per_gpu_bytes), 15.93, 0.005);
}

TEST(DeepSpeedEstimate, SevenBillionOnTwoNodes) {
  EstimateInputs inputs;
  inputs.params = 7'000'000'000;
  inputs.largest_layer_params = 500'000'000;
  inputs.gpus_per_node = 8;
  inputs.nodes = 2;  // total_gpus 16, gpus_factor 0.5
  EXPECT_EQ(deepspeed_estimate(inputs, 3, cpu, cpu)->per_gpu_bytes, 2'000'000'000);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, cpu, cpu)->per_node_cpu_bytes, 94'500'000'000);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, cpu)->per_gpu_bytes, 2'875'000'000);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, cpu)->per_node_cpu_bytes, 84'000'000'000);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, none)->per_gpu_bytes, 9'875'000'000);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, none)->per_node_cpu_bytes, 24'000'000'000);
  EXPECT_EQ(deepspeed_estimate(inputs, 2, none, cpu)->per_gpu_bytes, 14'000'000'000);
  EXPECT_EQ(deepspeed_estimate(inputs, 2, none, cpu)->per_node_cpu_bytes, 672'000'000'000);
  EXPECT_EQ(deepspeed_estimate(inputs, 2, none, none)->per_gpu_bytes, 35'000'000'000);
  EXPECT_EQ(deepspeed_estimate(inputs, 2, none, none)->per_node_cpu_bytes, 336'000'000'000);
}

// Sizes that do not divide evenly: int() truncates after Python's float division.
TEST(DeepSpeedEstimate, OddSizesTruncateLikePython) {
  EstimateInputs inputs;
  inputs.params = 1'234'567;
  inputs.largest_layer_params = 98'765;
  inputs.gpus_per_node = 3;
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, none)->per_gpu_bytes, 7'802'462);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, none)->per_node_cpu_bytes, 1'777'770);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, cpu)->per_gpu_bytes, 1'218'104);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, cpu)->per_node_cpu_bytes, 29'629'608);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, cpu, cpu)->per_node_cpu_bytes, 33'333'309);
  EXPECT_EQ(deepspeed_estimate(inputs, 2, none, none)->per_gpu_bytes, 11'522'625);
  EXPECT_EQ(deepspeed_estimate(inputs, 2, none, none)->per_node_cpu_bytes, 22'222'206);
  EXPECT_EQ(deepspeed_estimate(inputs, 2, none, cpu)->per_node_cpu_bytes, 29'629'608);

  inputs.params = 123'456'789;
  inputs.largest_layer_params = 4'567'890;
  inputs.gpus_per_node = 7;
  inputs.nodes = 3;  // gpus_factor = 1/3 in floating point
  EXPECT_EQ(deepspeed_estimate(inputs, 3, cpu, cpu)->per_gpu_bytes, 18'271'560);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, cpu, cpu)->per_node_cpu_bytes, 1'111'111'101);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, cpu)->per_gpu_bytes, 30'029'349);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, cpu)->per_node_cpu_bytes, 987'654'312);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, none)->per_gpu_bytes, 124'091'664);
  EXPECT_EQ(deepspeed_estimate(inputs, 3, none, none)->per_node_cpu_bytes, 191'851'380);
  EXPECT_EQ(deepspeed_estimate(inputs, 2, none, cpu)->per_gpu_bytes, 246'913'578);
  EXPECT_EQ(deepspeed_estimate(inputs, 2, none, cpu)->per_node_cpu_bytes, 15'555'555'414);
  EXPECT_EQ(deepspeed_estimate(inputs, 2, none, none)->per_gpu_bytes, 587'889'471);
  EXPECT_EQ(deepspeed_estimate(inputs, 2, none, none)->per_node_cpu_bytes, 5'185'185'138);
}

TEST(DeepSpeedEstimate, NvmeRowsAndStages0And1AreNotCovered) {
  EstimateInputs inputs = small_inputs();
  EXPECT_FALSE(deepspeed_estimate(inputs, 0, none, none));
  EXPECT_FALSE(deepspeed_estimate(inputs, 1, none, cpu));
  EXPECT_FALSE(deepspeed_estimate(inputs, 3, nvme, nvme));
  EXPECT_FALSE(deepspeed_estimate(inputs, 3, none, nvme));
  EXPECT_FALSE(deepspeed_estimate(inputs, 3, nvme, cpu));
  EXPECT_FALSE(deepspeed_estimate(inputs, 3, cpu, nvme));
}

TEST(CheckFit, NamesEveryShortfall) {
  EstimateRow row = estimate_row(small_inputs(), 3, nvme, nvme);
  MachineCapacity capacity;
  capacity.gpu_bytes = row.per_gpu_bytes;
  capacity.cpu_bytes = row.per_node_cpu_bytes;
  capacity.nvme_free_bytes = row.nvme_bytes;
  capacity.nvme_path = "/mnt/nvme";
  FitVerdict verdict = check_fit(row, capacity);
  EXPECT_EQ(verdict.fits, true);
  EXPECT_EQ(verdict.text, "fits");

  capacity.gpu_bytes = row.per_gpu_bytes - 1024 * 1024;
  capacity.nvme_free_bytes = 0;
  capacity.memlock_bytes = 64 * 1024;
  verdict = check_fit(row, capacity);
  EXPECT_EQ(verdict.fits, false);
  EXPECT_NE(verdict.text.find("needs 1.00 MiB more GPU memory"), std::string::npos) << verdict.text;
  EXPECT_NE(verdict.text.find("more free space at /mnt/nvme"), std::string::npos) << verdict.text;
  EXPECT_EQ(verdict.text.find("CPU RAM"), std::string::npos) << verdict.text;
}

// Pinning past the locked-memory limit does not stop a run (it trains unpinned), so the verdict
// still says fits, and says that.
TEST(CheckFit, PinningPastTheLockedMemoryLimitIsANoteNotAShortfall) {
  EstimateInputs inputs = small_inputs();
  inputs.optimizer_pin_memory = true;
  EstimateRow row = estimate_row(inputs, 3, none, nvme);
  MachineCapacity capacity;
  capacity.gpu_bytes = row.per_gpu_bytes;
  capacity.cpu_bytes = row.per_node_cpu_bytes;
  capacity.nvme_free_bytes = row.nvme_bytes;
  capacity.memlock_bytes = 64 * 1024;
  FitVerdict verdict = check_fit(row, capacity);
  EXPECT_EQ(verdict.fits, true);
  EXPECT_EQ(verdict.text.rfind("fits; pin_memory would lock ", 0), 0u) << verdict.text;
  EXPECT_NE(verdict.text.find("more than the locked-memory limit of 64.00 KiB (ulimit -l): trains "
                              "unpinned"),
            std::string::npos)
      << verdict.text;
  capacity.memlock_bytes = row.pinned_bytes_per_rank;
  EXPECT_EQ(check_fit(row, capacity).text, "fits");
}

TEST(CheckFit, UnknownGpuIsNeitherYesNorNo) {
  EstimateRow row = estimate_row(small_inputs(), 3, none, none);
  MachineCapacity capacity;
  capacity.gpu_unknown_reason = "no GPU";
  capacity.cpu_bytes = std::int64_t{1} << 40;
  FitVerdict verdict = check_fit(row, capacity);
  EXPECT_FALSE(verdict.fits.has_value());
  EXPECT_EQ(verdict.text, "GPU memory unknown");
  capacity.cpu_bytes = 0;
  row = estimate_row(small_inputs(), 3, none, cpu);
  EXPECT_EQ(check_fit(row, capacity).fits, false);
}

}  // namespace
}  // namespace strata::engine
