#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint/safetensors.h"

namespace strata::models {

// The weights of a Hugging Face model folder, mapped: `model.safetensors`, or the shards
// `model.safetensors.index.json` lists. Tensors are found by name and read element range by
// element range as fp32 (from F32, BF16 or F16), so loading never holds the model in memory.
class HfWeights {
 public:
  struct Tensor {
    std::string name;
    const engine::checkpoint::SafetensorsFile* file = nullptr;
    const engine::checkpoint::TensorEntry* entry = nullptr;
  };

  // Throws UserError naming the folder or file and the fix when neither file is there, the index
  // is malformed or names a shard that is missing, or a file is not valid safetensors.
  static HfWeights open(const std::filesystem::path& folder);

  const std::filesystem::path& folder() const noexcept { return folder_; }
  // nullptr when no file holds `name`.
  const Tensor* find(std::string_view name) const;
  // Every tensor, by name.
  const std::map<std::string, Tensor, std::less<>>& tensors() const noexcept { return tensors_; }

  // Elements [first, first + out.size()) of `tensor`, flattened row-major, as fp32. A floating
  // dtype is checked when the tensor is found (check_float).
  static void read(const Tensor& tensor, std::int64_t first, std::span<float> out);
  // Elements first, first + stride, ... (out.size() of them) of `tensor`, as fp32: a column of a
  // row-major matrix, for a layout stored transposed.
  static void read_strided(const Tensor& tensor, std::int64_t first, std::int64_t stride,
                           std::span<float> out);
  // Throws UserError naming the file and the tensor when it is not F32, BF16 or F16.
  static void check_float(const Tensor& tensor);

 private:
  std::filesystem::path folder_;
  std::vector<engine::checkpoint::SafetensorsFile> files_;
  std::map<std::string, Tensor, std::less<>> tensors_;
};

}  // namespace strata::models
