#include "gpu/cuda/library_loading.h"

#include <dlfcn.h>

#include <filesystem>

#include <fmt/format.h>

#include "base/error.h"

namespace strata::gpu::cuda {

void* open_library(const LibraryToLoad& library) {
  if (void* handle = dlopen(library.name, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string not_found = dlerror();
  const std::filesystem::path toolkit = std::filesystem::path(library.toolkit_dir) / library.name;
  if (void* handle = dlopen(toolkit.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  throw UserError(fmt::format("{} ({}) could not be loaded: {}; nor {}: {}", library.what,
                              library.name, not_found, toolkit.string(), dlerror()),
                  library.fix);
}

void* library_symbol(const LibraryToLoad& library, void* handle, const char* symbol) {
  if (void* address = dlsym(handle, symbol)) return address;
  throw UserError(fmt::format("{} has no {}: it is not the {} strata was built with", library.name,
                              symbol, library.what),
                  library.fix);
}

}  // namespace strata::gpu::cuda
