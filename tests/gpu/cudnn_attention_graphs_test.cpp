// The operation graphs of cuDNN's fused attention (gpu/cuda/cudnn_attention_graphs.h) stated on
// cuDNN's backend API, which checks each descriptor as it is finalized (the attributes' types
// and values, the products' operand shapes: a matmul whose inner dimensions differ is refused
// there): for plain and grouped query heads, in bfloat16 and float16. Stating needs cuDNN's
// library but no GPU; planning and running the graphs needs one (cuda_cudnn_attention_test.cpp).
// Skips where the build has no cuDNN headers.
#include <gtest/gtest.h>

#if STRATA_HAVE_CUDNN
#include <string>

#include "gpu/cuda/cudnn_attention_graphs.h"
#include "gpu/cuda/cudnn_graph.h"

namespace strata::gpu::cuda {
namespace {

struct GraphCase {
  const char* name;
  AttentionLayout layout;
  cudnnDataType_t io;
};

class CudnnAttentionGraphs : public ::testing::TestWithParam<GraphCase> {};

TEST_P(CudnnAttentionGraphs, EveryTensorAndOperationOfBothGraphsFinalizes) {
  const GraphCase& c = GetParam();
  for (auto state : {state_attention_forward, state_attention_backward}) {
    GraphBuilder graph;
    try {
      state(graph, c.layout, c.io);
    } catch (const CudnnRefused& refused) {
      FAIL() << c.name << ": " << refused.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudnnAttentionGraphs,
    ::testing::Values(GraphCase{"GptBf16", {8, 1024, 16, 16, 128}, CUDNN_DATA_BFLOAT16},
                      GraphCase{"GroupedFp16", {2, 1024, 32, 8, 128}, CUDNN_DATA_HALF},
                      GraphCase{"SmallGroupedBf16", {2, 37, 4, 2, 64}, CUDNN_DATA_BFLOAT16}),
    [](const ::testing::TestParamInfo<GraphCase>& param) { return std::string(param.param.name); });

}  // namespace
}  // namespace strata::gpu::cuda
#else
TEST(CudnnAttentionGraphs, NeedCudnnHeaders) {
  GTEST_SKIP() << "built without cuDNN's headers: CUDA's attention runs on strata's kernels";
}
#endif
