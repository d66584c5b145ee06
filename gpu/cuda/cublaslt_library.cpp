#include "gpu/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "base/error.h"

namespace strata::gpu::cuda {
namespace {

#define STRATA_STRINGIFY_VALUE(x) #x
#define STRATA_STRINGIFY(x) STRATA_STRINGIFY_VALUE(x)

// libcublasLt.so.13: the soname the toolkit's own link would have recorded.
constexpr const char* kLibraryName = "libcublasLt.so." STRATA_STRINGIFY(CUBLAS_VER_MAJOR);

std::string fix() {
  return fmt::format(
      "install cuBLAS {} (the CUDA toolkit, or NVIDIA's cuBLAS Python package) and put the folder "
      "holding {} on LD_LIBRARY_PATH",
      CUBLAS_VER_MAJOR, kLibraryName);
}

void* open_library() {
  if (void* handle = dlopen(kLibraryName, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string not_found = dlerror();
  const std::filesystem::path toolkit =
      std::filesystem::path(STRATA_CUDA_LIBRARY_DIR) / kLibraryName;
  if (void* handle = dlopen(toolkit.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  throw UserError(fmt::format("cuBLASLt ({}) could not be loaded: {}; nor {}: {}", kLibraryName,
                              not_found, toolkit.string(), dlerror()),
                  fix());
}

template <typename Function>
void load(void* library, const char* symbol, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, symbol));
  if (function != nullptr) return;
  throw UserError(fmt::format("{} has no {}: it is not the cuBLASLt strata was built with",
                              kLibraryName, symbol),
                  fix());
}

CublasLt load_all() {
  void* library = open_library();  // kept open for the process's life
  CublasLt api{};
  load(library, "cublasLtCreate", api.create);
  load(library, "cublasLtDestroy", api.destroy);
  load(library, "cublasLtMatmul", api.matmul);
  load(library, "cublasLtMatmulAlgoGetHeuristic", api.algo_get_heuristic);
  load(library, "cublasLtMatmulDescCreate", api.desc_create);
  load(library, "cublasLtMatmulDescDestroy", api.desc_destroy);
  load(library, "cublasLtMatmulDescSetAttribute", api.desc_set_attribute);
  load(library, "cublasLtMatmulPreferenceCreate", api.preference_create);
  load(library, "cublasLtMatmulPreferenceDestroy", api.preference_destroy);
  load(library, "cublasLtMatmulPreferenceSetAttribute", api.preference_set_attribute);
  load(library, "cublasLtMatrixLayoutCreate", api.layout_create);
  load(library, "cublasLtMatrixLayoutDestroy", api.layout_destroy);
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
