#pragma once

#include <string>

// What the libraries strata loads at their first use share (cublaslt_library.h,
// cudnn_library.h): opening one and finding its functions, each failure a UserError naming the
// library and how to make it found.
namespace strata::gpu::cuda {

// The library described by `what` ("cuBLASLt"), as the dynamic loader names it (`name`).
struct LibraryToLoad {
  const char* what;
  const char* name;         // "libcublasLt.so.13"
  const char* toolkit_dir;  // the lib folder of the CUDA toolkit strata was built with
  std::string fix;          // how to make it found
};

// Opens the library from wherever the dynamic loader finds it (LD_LIBRARY_PATH, the system's
// library paths), else from the toolkit's folder; it stays open for the process's life. Throws
// UserError naming both failures and the fix.
void* open_library(const LibraryToLoad& library);

// The address of `symbol` in the opened `handle`; throws UserError saying the library is not the
// one strata was built with (another major version) where it lacks the symbol.
void* library_symbol(const LibraryToLoad& library, void* handle, const char* symbol);

template <typename Function>
void load_symbol(const LibraryToLoad& library, void* handle, const char* symbol,
                 Function& function) {
  function = reinterpret_cast<Function>(library_symbol(library, handle, symbol));
}

}  // namespace strata::gpu::cuda
