#include "gpu/cuda/cudnn_library.h"

#include <dlfcn.h>
#include <link.h>

#include <string>

#include <fmt/format.h>

#include "gpu/cuda/library_loading.h"

namespace strata::gpu::cuda {
namespace {

#define STRATA_STRINGIFY_VALUE(x) #x
#define STRATA_STRINGIFY(x) STRATA_STRINGIFY_VALUE(x)

// libcudnn.so.9: the soname a link against the toolkit's cuDNN would have recorded.
constexpr const char* kLibraryName = "libcudnn.so." STRATA_STRINGIFY(CUDNN_MAJOR);

struct Loaded {
  Cudnn api{};
  std::string path;
};

Loaded load_all() {
  const LibraryToLoad library{
      "cuDNN", kLibraryName, STRATA_CUDNN_LIBRARY_DIR,
      fmt::format("install cuDNN {} (NVIDIA's cuDNN package, or the one PyTorch brings) and put "
                  "the folder holding {} on LD_LIBRARY_PATH",
                  CUDNN_MAJOR, kLibraryName)};
  void* handle = open_library(library);
  Loaded loaded;
  Cudnn& api = loaded.api;
  load_symbol(library, handle, "cudnnGetVersion", api.get_version);
  load_symbol(library, handle, "cudnnGetErrorString", api.get_error_string);
  load_symbol(library, handle, "cudnnGetLastErrorString", api.get_last_error_string);
  load_symbol(library, handle, "cudnnCreate", api.create);
  load_symbol(library, handle, "cudnnDestroy", api.destroy);
  load_symbol(library, handle, "cudnnSetStream", api.set_stream);
  load_symbol(library, handle, "cudnnBackendCreateDescriptor", api.create_descriptor);
  load_symbol(library, handle, "cudnnBackendDestroyDescriptor", api.destroy_descriptor);
  load_symbol(library, handle, "cudnnBackendSetAttribute", api.set_attribute);
  load_symbol(library, handle, "cudnnBackendGetAttribute", api.get_attribute);
  load_symbol(library, handle, "cudnnBackendFinalize", api.finalize);
  load_symbol(library, handle, "cudnnBackendExecute", api.execute);
  const link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr) loaded.path = map->l_name;
  return loaded;
}

const Loaded& loaded() {
  // A failed load throws out of the initialisation, and the next call tries again.
  static const Loaded library = load_all();
  return library;
}

}  // namespace

const char* cudnn_library_name() {
  return kLibraryName;
}

const Cudnn& cudnn() {
  return loaded().api;
}

std::string cudnn_description() {
  const Loaded& library = loaded();
  const std::size_t version = library.api.get_version();  // major * 10000 + minor * 100 + patch
  return fmt::format("{} {}.{}.{} ({})", kLibraryName, version / 10000, version / 100 % 100,
                     version % 100, library.path.empty() ? "path unknown" : library.path);
}

}  // namespace strata::gpu::cuda
