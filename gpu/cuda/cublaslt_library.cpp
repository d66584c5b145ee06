#include "gpu/cuda/cublaslt_library.h"

#include <fmt/format.h>

#include "gpu/cuda/library_loading.h"

namespace strata::gpu::cuda {
namespace {

#define STRATA_STRINGIFY_VALUE(x) #x
#define STRATA_STRINGIFY(x) STRATA_STRINGIFY_VALUE(x)

// libcublasLt.so.13: the soname the toolkit's own link would have recorded.
constexpr const char* kLibraryName = "libcublasLt.so." STRATA_STRINGIFY(CUBLAS_VER_MAJOR);

CublasLt load_all() {
  const LibraryToLoad library{
      "cuBLASLt", kLibraryName, STRATA_CUDA_LIBRARY_DIR,
      fmt::format("install cuBLAS {} (the CUDA toolkit, or NVIDIA's cuBLAS Python package) and "
                  "put the folder holding {} on LD_LIBRARY_PATH",
                  CUBLAS_VER_MAJOR, kLibraryName)};
  void* handle = open_library(library);
  CublasLt api{};
  load_symbol(library, handle, "cublasLtCreate", api.create);
  load_symbol(library, handle, "cublasLtDestroy", api.destroy);
  load_symbol(library, handle, "cublasLtMatmul", api.matmul);
  load_symbol(library, handle, "cublasLtMatmulAlgoGetHeuristic", api.algo_get_heuristic);
  load_symbol(library, handle, "cublasLtMatmulDescCreate", api.desc_create);
  load_symbol(library, handle, "cublasLtMatmulDescDestroy", api.desc_destroy);
  load_symbol(library, handle, "cublasLtMatmulDescSetAttribute", api.desc_set_attribute);
  load_symbol(library, handle, "cublasLtMatmulPreferenceCreate", api.preference_create);
  load_symbol(library, handle, "cublasLtMatmulPreferenceDestroy", api.preference_destroy);
  load_symbol(library, handle, "cublasLtMatmulPreferenceSetAttribute",
              api.preference_set_attribute);
  load_symbol(library, handle, "cublasLtMatrixLayoutCreate", api.layout_create);
  load_symbol(library, handle, "cublasLtMatrixLayoutDestroy", api.layout_destroy);
  return api;
}

}  // namespace

const char* cublaslt_library_name() {
  return kLibraryName;
}

const CublasLt& cublaslt() {
  // A failed load throws out of the initialisation, and the next call tries again.
  static const CublasLt api = load_all();
  return api;
}

}  // namespace strata::gpu::cuda
