#include "gpu/cuda/cudnn_library.h"

#include <dlfcn.h>
#include <link.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "base/error.h"

namespace strata::gpu::cuda {
namespace {

#define STRATA_STRINGIFY_VALUE(x) #x
#define STRATA_STRINGIFY(x) STRATA_STRINGIFY_VALUE(x)

// libcudnn.so.9: the soname a link against the toolkit's cuDNN would have recorded.
constexpr const char* kLibraryName = "libcudnn.so." STRATA_STRINGIFY(CUDNN_MAJOR);

std::string fix() {
  return fmt::format(
      "install cuDNN {} (NVIDIA's cuDNN package, or the one PyTorch brings) and put the folder "
      "holding {} on LD_LIBRARY_PATH",
      CUDNN_MAJOR, kLibraryName);
}

void* open_library() {
  if (void* handle = dlopen(kLibraryName, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string not_found = dlerror();
  const std::filesystem::path toolkit =
      std::filesystem::path(STRATA_CUDNN_LIBRARY_DIR) / kLibraryName;
  if (void* handle = dlopen(toolkit.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  throw UserError(fmt::format("cuDNN ({}) could not be loaded: {}; nor {}: {}", kLibraryName,
                              not_found, toolkit.string(), dlerror()),
                  fix());
}

template <typename Function>
void load(void* library, const char* symbol, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, symbol));
  if (function != nullptr) return;
  throw UserError(
      fmt::format("{} has no {}: it is not the cuDNN strata was built with", kLibraryName, symbol),
      fix());
}

struct Loaded {
  Cudnn api{};
  std::string path;
};

Loaded load_all() {
  void* library = open_library();  // kept open for the process's life
  Loaded loaded;
  Cudnn& api = loaded.api;
  load(library, "cudnnGetVersion", api.get_version);
  load(library, "cudnnGetErrorString", api.get_error_string);
  load(library, "cudnnGetLastErrorString", api.get_last_error_string);
  load(library, "cudnnCreate", api.create);
  load(library, "cudnnDestroy", api.destroy);
  load(library, "cudnnSetStream", api.set_stream);
  load(library, "cudnnBackendCreateDescriptor", api.create_descriptor);
  load(library, "cudnnBackendDestroyDescriptor", api.destroy_descriptor);
  load(library, "cudnnBackendSetAttribute", api.set_attribute);
  load(library, "cudnnBackendGetAttribute", api.get_attribute);
  load(library, "cudnnBackendFinalize", api.finalize);
  load(library, "cudnnBackendExecute", api.execute);
  const link_map* map = nullptr;
  if (dlinfo(library, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr) loaded.path = map->l_name;
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
