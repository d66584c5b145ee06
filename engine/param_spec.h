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
  // A table padded to an aligned height (models/vocab_padding.h): its first unpadded_rows rows
  // (of shape[0]) are the real ones, initialised by `init`; the rest start at zero and stay zero,
  // and are not part of the tensor a Hugging Face file holds. 0: no padding.
  std::int64_t unpadded_rows = 0;

  std::int64_t numel() const {
    std::int64_t count = 1;
    for (std::int64_t extent : shape)
      count *= extent;
    return count;
  }
  // The elements of the real rows, before any padding: all of them when there is none.
  std::int64_t unpadded_numel() const {
    return unpadded_rows > 0 ? numel() / shape.front() * unpadded_rows : numel();
  }
};

}  // namespace strata::engine
