#pragma once

#include <cuda_runtime.h>

#include <string>

#include "gpu/cuda/cuda_check.h"
#include "gpu/cuda/cuda_stream.h"
#include "gpu/stream.h"

// What every caller of the kernels (gpu/cuda/kernels/) does around a launch.
namespace strata::gpu::cuda {

// `stream`'s handle for one kernel or library call, with device `device_index` current on the
// calling thread (kernels launch on the current device). It is the call's op on the stream's
// timeline row, so it is used only inside the call's own expression (CudaStream::Traced).
inline CudaStream::Traced kernel_stream(Stream& stream, int device_index) {
  use_device(device_index);
  return as_cuda_stream(stream).traced("kernel");
}

// Throws CudaError naming `op` when its launch failed.
inline void launched(cudaError_t status, const char* op) {
  check(status, (std::string("kernel launch for ") + op).c_str());
}

}  // namespace strata::gpu::cuda
