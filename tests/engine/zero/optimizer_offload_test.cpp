#include "engine/zero/optimizer_offload.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "cpu_adam/half.h"
#include "gpu/open_device.h"
#include "tests/engine/random_floats.h"
#include "tests/engine/test_offload.h"

namespace strata::engine::zero {
namespace {

namespace fs = std::filesystem;

using test_values::random_floats;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class OffloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / fmt::format("strata-offload-test-{}", getpid());
    fs::create_directories(root_);
    device_ = gpu::create_host_device({});
  }
  void TearDown() override { fs::remove_all(root_); }
  OptimizerOffloadOptions options(OffloadDevice where, std::int64_t sub_group_size, bool read,
                                  bool write) const {
    OptimizerOffloadOptions result;
    result.device = where;
    result.sub_group_size = sub_group_size;
    result.pipeline_read = read;
    result.pipeline_write = write;
    result.nvme.nvme_path = root_;
    result.nvme.job_name = "offload";
    return result;
  }
  fs::path root_;
  std::unique_ptr<gpu::Device> device_;
};

struct Reference {
  std::vector<float> params, exp_avg, exp_avg_sq;
  std::vector<std::uint16_t> copy;
};

StepHyperparameters hyper(std::int64_t step) {
  StepHyperparameters result;
  result.lr = 1e-2;
  result.step = step;
  result.grad_scale = 0.5f;
  return result;
}

// Two steps offloaded, compared bit for bit with the same two steps in memory.
void expect_same_as_in_memory(gpu::Device& device, OptimizerType type, std::int64_t n,
                              const OptimizerOffloadOptions& options) {
  OptimizerConfig config;
  config.type = type;
  config.weight_decay = 0.01;
  const Optimizer optimizer(config);
  const std::vector<float> master = random_floats(n, 1, 1.0f);
  Reference expected{master, std::vector<float>(master.size()), std::vector<float>(master.size()),
                     std::vector<std::uint16_t>(master.size())};
  TestOffload offload(device, optimizer, master, options);
  std::vector<std::uint16_t> copy(master.size());
  for (std::int64_t step = 1; step <= 2; ++step) {
    const std::vector<float> grads = random_floats(n, static_cast<std::uint32_t>(step + 10), 0.1f);
    optimizer.step(hyper(step), expected.params, grads, expected.exp_avg, expected.exp_avg_sq,
                   ParamCopy::bf16, expected.copy);
    offload.step(hyper(step), grads, ParamCopy::bf16, copy);
  }
  std::vector<float> params(master.size()), exp_avg(master.size()), exp_avg_sq(master.size());
  offload.read_states(params, exp_avg, exp_avg_sq);
  EXPECT_TRUE(same_bits(params, expected.params));
  EXPECT_TRUE(same_bits(exp_avg, expected.exp_avg));
  EXPECT_TRUE(same_bits(exp_avg_sq, expected.exp_avg_sq));
  EXPECT_EQ(copy, expected.copy);
  if (offload.pool() != nullptr) {
    EXPECT_LE(offload.pool()->peak_in_use(), options.buffer_count);
    EXPECT_LE(offload.peak_in_flight(), options.buffer_count);
    EXPECT_EQ(offload.pool()->in_use(), 0);
  }
}

using Case = std::tuple<OptimizerType, std::int64_t, std::int64_t, bool, bool>;
class OffloadBitwise : public OffloadTest, public ::testing::WithParamInterface<Case> {};

TEST_P(OffloadBitwise, NvmeStepIsBitwiseTheInMemoryStep) {
  const auto [type, n, sub_group_size, read, write] = GetParam();
  expect_same_as_in_memory(*device_, type, n,
                           options(OffloadDevice::nvme, sub_group_size, read, write));
}

TEST_P(OffloadBitwise, CpuStepIsBitwiseTheInMemoryStep) {
  const auto [type, n, sub_group_size, read, write] = GetParam();
  expect_same_as_in_memory(*device_, type, n,
                           options(OffloadDevice::cpu, sub_group_size, read, write));
}

INSTANTIATE_TEST_SUITE_P(SizesAndPipelines, OffloadBitwise,
                         ::testing::Combine(::testing::Values(OptimizerType::adam,
                                                              OptimizerType::adamw),
                                            ::testing::Values(1000, 3 * 4096 + 5, 40001),
                                            ::testing::Values(2048, 6000, 1'000'000'000),
                                            ::testing::Bool(), ::testing::Bool()));

// bf16 master weights, gradients and moments (bf16.bf16_master_weights_and_grads and
// bf16_optimizer_states), offloaded to CPU memory or NVMe: two steps are the in-memory typed step
// bit for bit, and the states come back out widened exactly.
TEST_F(OffloadTest, Bf16StatesStepIsBitwiseTheInMemoryStep) {
  for (OffloadDevice where : {OffloadDevice::cpu, OffloadDevice::nvme}) {
    for (bool moments : {false, true}) {
      SCOPED_TRACE(fmt::format("{} moments {}", where == OffloadDevice::cpu ? "cpu" : "nvme",
                               moments ? "bf16" : "fp32"));
      OptimizerConfig config;
      config.type = OptimizerType::adamw;
      config.weight_decay = 0.01;
      const Optimizer optimizer(config);
      const StateTypes types{true, moments};
      const std::int64_t n = 3 * 4096 + 5;
      const auto count = static_cast<std::size_t>(n);
      std::vector<float> master = random_floats(n, 1, 1.0f);
      std::vector<cpu_adam::bf16> p(count);
      for (std::size_t i = 0; i < count; ++i) {
        p[i] = cpu_adam::to_bf16(master[i]);
        master[i] = cpu_adam::to_float(p[i]);  // bf16-exact, so the fill holds it as it is
      }
      const std::size_t moment_bytes = count * static_cast<std::size_t>(types.moment_bytes());
      std::vector<std::byte> m(moment_bytes), v(moment_bytes);  // zero in either type
      OptimizerOffloadOptions o = options(where, 6000, true, true);
      o.types = types;
      TestOffload offload(*device_, optimizer, master, o);
      std::vector<std::uint16_t> expected_copy(count), copy(count);
      for (std::int64_t step = 1; step <= 2; ++step) {
        std::vector<cpu_adam::bf16> grads(count);
        const std::vector<float> wide =
            random_floats(n, static_cast<std::uint32_t>(step + 10), 0.1f);
        for (std::size_t i = 0; i < count; ++i)
          grads[i] = cpu_adam::to_bf16(wide[i]);
        const auto grad_bytes = std::as_bytes(std::span(grads));
        optimizer.step(hyper(step), types,
                       StateArrays{std::as_writable_bytes(std::span(p)), grad_bytes, m, v}, n,
                       ParamCopy::bf16, expected_copy);
        PartitionGrads source(grad_bytes, 2);
        PartitionMemory sink(std::as_writable_bytes(std::span(copy)), 2);
        offload.step(hyper(step), StepIo{&source, ParamCopy::bf16, &sink});
      }
      std::vector<float> params(count), exp_avg(count), exp_avg_sq(count);
      offload.read_states(params, exp_avg, exp_avg_sq);
      auto widened = [&](std::span<const std::byte> bytes, bool bf16) {
        std::vector<float> out(count);
        for (std::size_t i = 0; i < count; ++i) {
          if (bf16) {
            out[i] = cpu_adam::to_float(reinterpret_cast<const cpu_adam::bf16*>(bytes.data())[i]);
          } else {
            std::memcpy(&out[i], bytes.data() + i * 4, 4);
          }
        }
        return out;
      };
      EXPECT_TRUE(same_bits(params, widened(std::as_bytes(std::span(p)), true)));
      EXPECT_TRUE(same_bits(exp_avg, widened(m, moments)));
      EXPECT_TRUE(same_bits(exp_avg_sq, widened(v, moments)));
      EXPECT_EQ(copy, expected_copy);
    }
  }
}

TEST_F(OffloadTest, AdagradAndLionKeepOneState) {
  for (OptimizerType type : {OptimizerType::adagrad, OptimizerType::lion})
    expect_same_as_in_memory(*device_, type, 9000, options(OffloadDevice::nvme, 2048, true, true));
}

TEST_F(OffloadTest, BufferCountBoundsTheSubGroupsInFlight) {
  for (std::int64_t count : {1, 2, 3, 5}) {
    OptimizerOffloadOptions o = options(OffloadDevice::nvme, 2048, true, true);
    o.buffer_count = count;
    expect_same_as_in_memory(*device_, OptimizerType::adamw, 30000, o);
  }
}

// An injected fault during a step: the step throws naming the swap file, the state is marked
// inconsistent, and every later step refuses. The fix keeps the cause's own (free space, check
// the drive) and says that the run cannot go on from this state.
void expect_fault_marks_inconsistent(gpu::Device& device, OptimizerOffloadOptions o,
                                     const std::string& expected_in_message,
                                     const std::string& expected_fix) {
  OptimizerConfig config;
  const Optimizer optimizer(config);
  const std::int64_t n = 40000;  // 20 sub-groups of 2048: init writes are completions 0..19
  const std::vector<float> master = random_floats(n, 1, 1.0f);
  const std::vector<float> grads = random_floats(n, 2, 0.1f);
  TestOffload offload(device, optimizer, master, o);
  std::vector<std::uint16_t> copy(master.size());
  try {
    offload.step(hyper(1), grads, ParamCopy::bf16, copy);
    FAIL() << "expected the step to fail";
  } catch (const UserError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find(offload.store()->swap_file().string()), std::string::npos) << what;
    EXPECT_NE(what.find(expected_in_message), std::string::npos) << what;
    EXPECT_NE(what.find("offset"), std::string::npos) << what;
    // The cause's own fix, then what it means for the run.
    EXPECT_NE(error.fix().find(expected_fix), std::string::npos) << error.fix();
    EXPECT_NE(error.fix().find("training cannot continue from this state"), std::string::npos);
  }
  EXPECT_TRUE(offload.inconsistent());
  EXPECT_EQ(offload.pool()->in_use(), 0);
  try {
    offload.step(hyper(2), grads, ParamCopy::bf16, copy);
    FAIL() << "expected the later step to refuse";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("cannot continue"), std::string::npos);
    EXPECT_NE(error.fix().find("training cannot continue from this state"), std::string::npos);
  }
}

TEST_F(OffloadTest, EioMidStepMarksTheStateInconsistent) {
  for (bool pipelined : {false, true}) {
    OptimizerOffloadOptions o = options(OffloadDevice::nvme, 2048, pipelined, pipelined);
    o.nvme.faults.fail(27, EIO);
    expect_fault_marks_inconsistent(*device_, o, strerror(EIO), "SMART log");
  }
}

TEST_F(OffloadTest, EnospcMidStepMarksTheStateInconsistent) {
  OptimizerOffloadOptions o = options(OffloadDevice::nvme, 2048, true, true);
  for (int index = 20; index < 60; ++index)
    o.nvme.faults.fail(index, ENOSPC);
  expect_fault_marks_inconsistent(*device_, o, strerror(ENOSPC), "free space on that disk");
}

TEST_F(OffloadTest, AFlippedBitMidStepIsAChecksumErrorAndMarksInconsistent) {
  OptimizerOffloadOptions o = options(OffloadDevice::nvme, 2048, true, false);
  for (int index = 20; index < 60; ++index)
    o.nvme.faults.flip_bit(index);
  expect_fault_marks_inconsistent(*device_, o, "checksum", "do not trust this file");
}

TEST_F(OffloadTest, ShortTransfersAreRetriedAndTheStepIsExact) {
  OptimizerOffloadOptions o = options(OffloadDevice::nvme, 8192, true, true);
  for (int index = 0; index < 40; index += 3)
    o.nvme.faults.shorten(index);
  expect_same_as_in_memory(*device_, OptimizerType::adamw, 40000, o);
}

TEST_F(OffloadTest, RefusesNoDeviceAndNoBuffers) {
  const Optimizer optimizer(OptimizerConfig{});
  const std::vector<float> master(100);
  EXPECT_THROW(
      TestOffload(*device_, optimizer, master, options(OffloadDevice::none, 2048, false, false)),
      UserError);
  OptimizerOffloadOptions o = options(OffloadDevice::nvme, 2048, false, false);
  o.buffer_count = 0;
  EXPECT_THROW(TestOffload(*device_, optimizer, master, o), UserError);
}

TEST_F(OffloadTest, SwapFilesAreRemovedAtCleanExit) {
  const Optimizer optimizer(OptimizerConfig{});
  const std::vector<float> master(5000, 1.0f);
  fs::path directory;
  {
    TestOffload offload(*device_, optimizer, master,
                        options(OffloadDevice::nvme, 2048, true, true));
    directory = offload.store()->directory();
    EXPECT_TRUE(fs::exists(offload.store()->swap_file()));
  }
  EXPECT_FALSE(fs::exists(directory));
}

}  // namespace
}  // namespace strata::engine::zero
