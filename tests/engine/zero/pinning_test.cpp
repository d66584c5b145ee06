// pin_memory as a run settles it (engine/zero/offload_options.h, settle_pin_memory): on unless
// turned off, as DeepSpeed's; asked for and within what the process may lock, the run pins exactly
// what the estimate counts; past it, the run trains unpinned with one warning, or is refused
// under strata.require_pinned_memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "base/error.h"
#include "engine/config/config.h"
#include "engine/config/config_error.h"
#include "engine/engine.h"
#include "engine/memory_estimate.h"
#include "engine/zero/offload_options.h"
#include "gpu/comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "gpu/pinned_limit.h"
#include "models/model_plan.h"
#include "tests/engine/swap_directory.h"
#include "tests/engine/test_world.h"

namespace strata::engine {
namespace {

using ::testing::HasSubstr;

constexpr std::int64_t kMiB = 1 << 20;

using testing::SwapDirectory;

// A stage-3 config of a small GPT with both offload sections on `device` (cpu or nvme under
// `swap`); `pin` is written as both sections' pin_memory unless empty, `strata_extra` inside the
// strata section.
Config offload_config(const std::string& device, const std::string& swap,
                      const std::string& pin = "", const std::string& strata_extra = "") {
  const std::string path = device == "nvme" ? R"(, "nvme_path": ")" + swap + "\"" : "";
  const std::string pin_key = pin.empty() ? "" : R"(, "pin_memory": )" + pin;
  const std::string offload = R"({"device": ")" + device + "\"" + path + pin_key + "}";
  return parse_config_text(R"({
    "train_micro_batch_size_per_gpu": 2,
    "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 3, "offload_param": )" +
                               offload + R"(, "offload_optimizer": )" + offload + R"(},
    "strata": {"model": {"n_layer": 2, "n_head": 2, "d_model": 64, "seq_len": 16, "vocab": 256},
               "seed": 7)" + strata_extra +
                               "}}",
                           "pinning test config")
      .config;
}

TEST(PinMemory, IsOnUnlessTurnedOffAsInDeepSpeed) {
  const Config config = offload_config("cpu", "");
  EXPECT_TRUE(config.zero.offload_param.pin_memory);
  EXPECT_TRUE(config.zero.offload_optimizer.pin_memory);
  EXPECT_FALSE(config.strata.require_pinned_memory);
  EXPECT_TRUE(zero::pins_memory(config));
  const nlohmann::json printed = to_json(config);
  EXPECT_EQ(printed["zero_optimization"]["offload_param"]["pin_memory"], true);
  EXPECT_EQ(printed["zero_optimization"]["offload_optimizer"]["pin_memory"], true);
  EXPECT_EQ(printed["strata"]["require_pinned_memory"], false);
  // The estimate's defaults are a config's without the keys.
  EXPECT_TRUE(EstimateInputs{}.param_pin_memory);
  EXPECT_TRUE(EstimateInputs{}.optimizer_pin_memory);
  EXPECT_FALSE(zero::pins_memory(offload_config("cpu", "", "false")));
}

TEST(PinMemory, RequirePinnedMemoryIsReadAndPrinted) {
  const Config config = offload_config("cpu", "", "true", R"(, "require_pinned_memory": true)");
  EXPECT_TRUE(config.strata.require_pinned_memory);
  EXPECT_EQ(to_json(config)["strata"]["require_pinned_memory"], true);
  EXPECT_EQ(parse_config(to_json(config)).config.strata.require_pinned_memory, true);
  EXPECT_THROW(offload_config("cpu", "", "true", R"(, "require_pinned_memory": 3)"), ConfigError);
}

TEST(SettlePinMemory, WhatFitsIsLeftAsAsked) {
  Config config = offload_config("cpu", "", "true");
  ASSERT_TRUE(zero::pins_memory(config));
  EXPECT_EQ(zero::settle_pin_memory(config, 4 * kMiB, 4 * kMiB, {8 * kMiB, false}), std::nullopt);
  // CAP_IPC_LOCK lifts the limit, as mlock's rule has it.
  EXPECT_EQ(zero::settle_pin_memory(config, 439 * kMiB, 0, {8 * kMiB, true}), std::nullopt);
  EXPECT_EQ(zero::settle_pin_memory(config, 439 * kMiB, 0, {std::nullopt, false}), std::nullopt);
  EXPECT_TRUE(config.zero.offload_param.pin_memory);
  EXPECT_TRUE(config.zero.offload_optimizer.pin_memory);
}

TEST(SettlePinMemory, PastTheLimitTrainsUnpinnedWithOneWarning) {
  Config config = offload_config("cpu", "", "true");
  const std::optional<std::string> warning =
      zero::settle_pin_memory(config, 439 * kMiB, 4096, {8 * kMiB, false});
  ASSERT_TRUE(warning.has_value());
  EXPECT_FALSE(config.zero.offload_param.pin_memory);
  EXPECT_FALSE(config.zero.offload_optimizer.pin_memory);
  EXPECT_THAT(*warning, HasSubstr("zero_optimization.offload_param.pin_memory and "
                                  "zero_optimization.offload_optimizer.pin_memory ask for "
                                  "439.00 MiB (460324864 bytes) of page-locked host memory"));
  EXPECT_THAT(*warning, HasSubstr("may lock 8.00 MiB (RLIMIT_MEMLOCK, 8192 KiB"));
  EXPECT_THAT(*warning, HasSubstr("4.00 KiB is locked already"));
  EXPECT_THAT(*warning, HasSubstr("training from unpinned host memory"));
  EXPECT_THAT(*warning, HasSubstr("at least 449540 KiB"));
  EXPECT_THAT(*warning, HasSubstr("CAP_IPC_LOCK"));
  EXPECT_THAT(*warning, HasSubstr("set pin_memory to false"));
  EXPECT_THAT(*warning, HasSubstr("strata.require_pinned_memory to true"));
  // Settled once: nothing is asked any more, so nothing more is said.
  EXPECT_EQ(zero::settle_pin_memory(config, 8192, 0, {8 * kMiB, false}), std::nullopt);
}

TEST(SettlePinMemory, OnlyTheSectionThatAsksIsNamed) {
  Config config = offload_config("cpu", "", "false");
  config.zero.offload_optimizer.pin_memory = true;
  const std::optional<std::string> warning =
      zero::settle_pin_memory(config, 16 * kMiB, 0, {kMiB, false});
  ASSERT_TRUE(warning.has_value());
  EXPECT_THAT(*warning, HasSubstr("zero_optimization.offload_optimizer.pin_memory asks for"));
  EXPECT_THAT(*warning, ::testing::Not(HasSubstr("offload_param")));
  // A section that offloads nothing pins nothing, whatever its pin_memory.
  Config none = offload_config("cpu", "");
  none.zero.offload_param.device = OffloadDevice::none;
  none.zero.offload_optimizer.device = OffloadDevice::none;
  none.zero.offload_param.pin_memory = true;
  none.zero.offload_optimizer.pin_memory = true;
  EXPECT_FALSE(zero::pins_memory(none));
  EXPECT_EQ(zero::settle_pin_memory(none, 16 * kMiB, 0, {0, false}), std::nullopt);
}

TEST(SettlePinMemory, RequirePinnedMemoryRefusesWithTheFix) {
  Config config = offload_config("cpu", "", "true", R"(, "require_pinned_memory": true)");
  try {
    zero::settle_pin_memory(config, 439 * kMiB, 0, {8 * kMiB, false});
    FAIL() << "expected UserError";
  } catch (const UserError& error) {
    EXPECT_EQ(error.exit_status(), 1);
    EXPECT_THAT(error.what(), HasSubstr("439.00 MiB"));
    EXPECT_THAT(error.what(), HasSubstr("may lock 8.00 MiB"));
    EXPECT_THAT(error.what(), HasSubstr("strata.require_pinned_memory is true"));
    EXPECT_THAT(error.fix(), HasSubstr("ulimit -l"));
    EXPECT_THAT(error.fix(), HasSubstr("CAP_IPC_LOCK"));
    EXPECT_THAT(error.fix(), HasSubstr("set pin_memory to false"));
  }
  EXPECT_TRUE(config.zero.offload_optimizer.pin_memory);
}

// The need the run settles by is what it pins: the estimate's pinned terms, to the byte, are the
// device's page-locked memory once the engine is built with pin_memory (where this process may
// lock that much): with both tiers on NVMe (the swap buffers) and in CPU memory (the shards and
// the optimizer's states too).
class PinnedTerms : public ::testing::TestWithParam<OffloadDevice> {};

TEST_P(PinnedTerms, TheEstimatesPinnedTermsAreWhatTheEnginePins) {
  SwapDirectory swap;
  const OffloadDevice tier = GetParam();
  const Config config =
      offload_config(tier == OffloadDevice::nvme ? "nvme" : "cpu", swap.string(), "true");
  auto device = gpu::create_host_device({});
  auto ops = gpu::create_ops(*device);
  auto comm = gpu::create_comm(testing::test_world(), *device);
  // After the device: its activations go before it.
  auto model = models::build_model(
      models::plan_model(config.strata.model, config.batch.train_micro_batch_size_per_gpu));
  EstimateInputs inputs =
      estimate_inputs_from_config(config, 0, 0, testing::test_world().world_size(), 1);
  set_model(inputs, declare(*model));
  const EstimateRow row = estimate_row(inputs, 3, tier, tier);
  if (!gpu::pinned_limit().allows(0, row.pinned_bytes_per_rank))
    GTEST_SKIP() << "this process may lock " << gpu::pinned_limit().describe() << ", less than "
                 << row.pinned_bytes_per_rank << " bytes";
  Runtime runtime{*device, *ops, *comm};
  Engine engine(runtime, config, *model);
  EXPECT_GT(row.pinned_bytes_per_rank, 8192);
  EXPECT_EQ(device->pinned_bytes_in_use(), row.pinned_bytes_per_rank);
}

INSTANTIATE_TEST_SUITE_P(Tiers, PinnedTerms,
                         ::testing::Values(OffloadDevice::cpu, OffloadDevice::nvme),
                         [](const ::testing::TestParamInfo<OffloadDevice>& tier_info) {
                           return std::string(tier_info.param == OffloadDevice::cpu ? "cpu"
                                                                                    : "nvme");
                         });

}  // namespace
}  // namespace strata::engine
