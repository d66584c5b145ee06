// CUDA's attention on cuDNN's fused flash attention (gpu/cuda/cudnn_attention.h) against the host
// backend's, in bfloat16 and float16: forward and backward on toy shapes (plain and grouped query
// heads, one tile of keys and several with a ragged last one, head_dim 64 and 128) and at the
// shapes the models train at (the 1.3B GPT's, 2,048 positions, Llama 3's grouped heads), the path
// counters showing that cuDNN ran every call. A qkv one element off its alignment runs on
// strata's own kernels, as the counters show. The tolerances are cuda_ops_fixture.h's: cuDNN
// rounds the probabilities and dS to the element type before their products, as strata's
// tensor-core kernels do, and its gradient is rounded once more where it is added into dqkv
// (within the one rounding dqkv is allowed, since the gradient is no larger than the result).
// Skips without a usable GPU, and where the build or the machine has no cuDNN (the reason from
// gpu::attention_backend).
#include <gtest/gtest.h>

#include <string>

#include "gpu/device_query.h"
#include "gpu/ops.h"
#include "tests/gpu/cuda_ops_fixture.h"

namespace strata::gpu {
namespace {

class CudnnAttentionTest : public CudaOpsTest, public ::testing::WithParamInterface<DataType> {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    const std::string backend = attention_backend();
    if (!backend.starts_with("cuDNN")) GTEST_SKIP() << backend;
    std::printf("[ cuDNN ] %s\n", backend.c_str());
  }

  // The model shapes' qkv and gradients run to a few hundred MB a side.
  i64 budget_bytes() const override { return i64{12} << 30; }
  OpsOptions ops_options() const override { return OpsOptions{.cudnn_attention = true}; }

  // cuDNN for 16-bit tensors of a head_dim whose rows are whole 16-byte vectors, on a 16-byte
  // aligned qkv; strata's own kernels otherwise.
  AttentionPath expected_attention_path(DataType type, const AttentionCase& c,
                                        i64 qkv_offset) const override {
    if (type != DataType::float32 && c.head_dim % 8 == 0 && qkv_offset * 2 % 16 == 0)
      return AttentionPath::cudnn;
    return CudaOpsTest::expected_attention_path(type, c, qkv_offset);
  }

  DataType type() const { return GetParam(); }
};

TEST_P(CudnnAttentionTest, ToyShapesMatchTheHost) {
  for (const AttentionCase& c : {AttentionCase{2, 7, 3, 3, 64}, AttentionCase{2, 37, 4, 2, 128},
                                 AttentionCase{1, 133, 6, 2, 64}, AttentionCase{1, 129, 2, 2, 128},
                                 AttentionCase{2, 191, 4, 1, 128}})
    expect_attention_matches(type(), c);
  expect_attention_matches(type(), AttentionCase{2, 37, 4, 2, 64}, 1);
}

// The 1.3B GPT's attention (8 x 1,024 positions, 16 heads of 128), 2,048 positions, and Llama 3's
// grouped query heads (32 over 8).
TEST_P(CudnnAttentionTest, ModelShapesMatchTheHost) {
  for (const AttentionCase& c :
       {AttentionCase{8, 1024, 16, 16, 128}, AttentionCase{4, 2048, 16, 16, 128},
        AttentionCase{2, 1024, 32, 8, 128}})
    expect_attention_matches(type(), c);
}

std::string type_name(const ::testing::TestParamInfo<DataType>& info) {
  return std::string(to_string(info.param));
}

INSTANTIATE_TEST_SUITE_P(Types, CudnnAttentionTest,
                         ::testing::Values(DataType::bfloat16, DataType::float16), type_name);

}  // namespace
}  // namespace strata::gpu
