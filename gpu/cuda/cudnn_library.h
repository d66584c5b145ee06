#pragma once

#include <cudnn_graph.h>

#include <string>

namespace strata::gpu::cuda {

// The cuDNN functions the attention graphs call (cudnn_attention.h): the handle and the backend
// graph API. Loaded when the first CudaOps wants them rather than linked, like cuBLASLt
// (cublaslt_library.h): a process that never runs attention on a GPU pays nothing, and a
// machine whose PyTorch brings its own cuDNN 9 can point LD_LIBRARY_PATH at it.
struct Cudnn {
  decltype(&cudnnGetVersion) get_version;
  decltype(&cudnnGetErrorString) get_error_string;
  decltype(&cudnnGetLastErrorString) get_last_error_string;
  decltype(&cudnnCreate) create;
  decltype(&cudnnDestroy) destroy;
  decltype(&cudnnSetStream) set_stream;
  decltype(&cudnnBackendCreateDescriptor) create_descriptor;
  decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor;
  decltype(&cudnnBackendSetAttribute) set_attribute;
  decltype(&cudnnBackendGetAttribute) get_attribute;
  decltype(&cudnnBackendFinalize) finalize;
  decltype(&cudnnBackendExecute) execute;
};

// The library's name for the dynamic loader: libcudnn.so.<the major version of the headers>.
const char* cudnn_library_name();

// Loads the library once, thread-safe, and returns its functions: from wherever the dynamic
// loader finds it (LD_LIBRARY_PATH, the system's library paths), else from the lib folder of the
// CUDA toolkit strata was built with. Throws UserError naming the library and how to make it
// found when neither has it, or when it lacks a function (another major version).
const Cudnn& cudnn();

// Where the loaded library lives and its version, "libcudnn.so.9 9.19.0 (/path/libcudnn.so.9)",
// for the line that says which attention runs; loads it if need be.
std::string cudnn_description();

}  // namespace strata::gpu::cuda
