// cuDNN is loaded by the first attention call that wants it, not at the start of every process
// that links strata_gpu (gpu/cuda/cudnn_library.h), and says which library it is. Runs without a
// GPU: loading the library needs none. Skips where the build has no cuDNN headers.
#include <dlfcn.h>
#include <gtest/gtest.h>

#if STRATA_HAVE_CUDNN
#include <string>

#include "gpu/cuda/cudnn_library.h"

namespace strata::gpu::cuda {
namespace {

// Whether the library was in this process when it started: read while the test program
// initialises, before any test runs.
const bool loaded_at_start = dlopen(cudnn_library_name(), RTLD_NOW | RTLD_NOLOAD) != nullptr;

TEST(CudnnLibrary, IsLoadedByItsFirstUseWithEveryFunctionNotAtStart) {
  EXPECT_FALSE(loaded_at_start) << cudnn_library_name() << " was loaded at start";
  const Cudnn& api = cudnn();
  EXPECT_NE(dlopen(cudnn_library_name(), RTLD_NOW | RTLD_NOLOAD), nullptr);
  for (const void* function :
       {reinterpret_cast<const void*>(api.get_version),
        reinterpret_cast<const void*>(api.get_error_string),
        reinterpret_cast<const void*>(api.get_last_error_string),
        reinterpret_cast<const void*>(api.create), reinterpret_cast<const void*>(api.destroy),
        reinterpret_cast<const void*>(api.set_stream),
        reinterpret_cast<const void*>(api.create_descriptor),
        reinterpret_cast<const void*>(api.destroy_descriptor),
        reinterpret_cast<const void*>(api.set_attribute),
        reinterpret_cast<const void*>(api.get_attribute),
        reinterpret_cast<const void*>(api.finalize), reinterpret_cast<const void*>(api.execute)})
    EXPECT_NE(function, nullptr);
  EXPECT_EQ(&cudnn(), &api) << "loaded once";
  // "libcudnn.so.9 9.x.y (/its/path)": the major version the headers name, and where it lives.
  const std::string description = cudnn_description();
  EXPECT_TRUE(description.starts_with(std::string(cudnn_library_name()) + " 9.")) << description;
  EXPECT_NE(description.find("/libcudnn.so.9"), std::string::npos) << description;
}

}  // namespace
}  // namespace strata::gpu::cuda
#else
TEST(CudnnLibrary, NeedsCudnnHeaders) {
  GTEST_SKIP() << "built without cuDNN's headers: CUDA's attention runs on strata's kernels";
}
#endif
