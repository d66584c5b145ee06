#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::engine {

enum class ParamInit { normal, zeros, ones };

// One parameter tensor as a module declares it, once, before anything is allocated. The engine
// owns the storage: it flattens each module's tensors into one buffer (engine/zero/flat_layout.h)
// and hands the module pointers into it.
struct ParamSpec {
  std::string name;                 // unique in the model: "h.3.attn.qkv.weight"
  std::vector<std::int64_t> shape;  // row-major
  ParamInit init = ParamInit::normal;
  // for ParamInit::normal. Weight decay applies to every parameter alike, as DeepSpeed's
  // optimizer applies it to model.parameters() given as one group.
  float init_std = 0.02f;

  std::int64_t numel() const {
    std::int64_t count = 1;
    for (std::int64_t extent : shape)
      count *= extent;
    return count;
  }
};

}  // namespace strata::engine
