// cuBLASLt is loaded by the first CUDA matmul op, not at the start of every process that links
// strata_gpu (gpu/cuda/cublaslt_library.h): the library's start-up costs about half a second of
// CPU. Runs without a GPU: loading the library needs none.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "gpu/cuda/cublaslt_library.h"

namespace strata::gpu::cuda {
namespace {

// Whether the library was in this process when it started: read while the test program (which
// links strata_gpu with every CUDA op) initialises, before any test runs.
const bool loaded_at_start = dlopen(cublaslt_library_name(), RTLD_NOW | RTLD_NOLOAD) != nullptr;

TEST(CublasLtLibrary, IsLoadedByItsFirstUseWithEveryFunctionNotAtStart) {
  EXPECT_FALSE(loaded_at_start) << cublaslt_library_name() << " was loaded at start";
  const CublasLt& api = cublaslt();
  EXPECT_NE(dlopen(cublaslt_library_name(), RTLD_NOW | RTLD_NOLOAD), nullptr);
  for (const void* function :
       {reinterpret_cast<const void*>(api.create), reinterpret_cast<const void*>(api.destroy),
        reinterpret_cast<const void*>(api.matmul),
        reinterpret_cast<const void*>(api.algo_get_heuristic),
        reinterpret_cast<const void*>(api.desc_create),
        reinterpret_cast<const void*>(api.desc_destroy),
        reinterpret_cast<const void*>(api.desc_set_attribute),
        reinterpret_cast<const void*>(api.preference_create),
        reinterpret_cast<const void*>(api.preference_destroy),
        reinterpret_cast<const void*>(api.preference_set_attribute),
        reinterpret_cast<const void*>(api.layout_create),
        reinterpret_cast<const void*>(api.layout_destroy)})
    EXPECT_NE(function, nullptr);
  EXPECT_EQ(&cublaslt(), &api) << "loaded once";
}

}  // namespace
}  // namespace strata::gpu::cuda
