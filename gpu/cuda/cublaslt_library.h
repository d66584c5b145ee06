#pragma once

#include <cublasLt.h>

namespace strata::gpu::cuda {

// The cuBLASLt functions CudaMatmul calls, from libcublasLt loaded when the first CudaMatmul is
// made rather than linked into the program: the library's start-up registers its kernels with
// the CUDA runtime, about half a second of CPU in every process that links it, whether it has a
// GPU or not (every `strata` command, every test process).
struct CublasLt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtMatmul) matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set_attribute;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
};

// The library's name for the dynamic loader: libcublasLt.so.<the major version of the headers>.
const char* cublaslt_library_name();

// Loads the library once, thread-safe, and returns its functions: from wherever the dynamic
// loader finds it (LD_LIBRARY_PATH, the system's library paths), else from the lib folder of the
// CUDA toolkit strata was built with. Throws UserError naming the library and how to make it
// found when neither has it, or when it lacks a function (another major version).
const CublasLt& cublaslt();

}  // namespace strata::gpu::cuda
