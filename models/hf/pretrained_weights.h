#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model.h"
#include "engine/param_spec.h"
#include "models/hf/hf_names.h"
#include "models/hf/hf_weights.h"

namespace strata::models {

// A Hugging Face folder's weights as a model's starting values (engine::WeightSource). Every
// parameter the model declares is found by its HF name (`naming`), its shape checked against the
// declaration (transposed where HF stores it so; a padded token table's HF tensor has its
// unpadded rows, engine/param_spec.h) and its dtype against F32/BF16/F16, before anything is
// read. A padded table's rows past the file's are zero. Tensors that are buffers of the
// architecture are passed over; any other tensor of the folder is refused, since a model that does
// not use it is not the model the file holds.
class PretrainedWeights final : public engine::WeightSource {
 public:
  // `specs`: the model's parameters in declaration order across modules. Throws UserError naming
  // the folder (or file), the tensor and the fix.
  PretrainedWeights(HfWeights weights, const std::vector<engine::ParamSpec>& specs,
                    const HfNaming& naming);

  void read(std::size_t tensor_index, std::int64_t first_element,
            std::span<float> out) const override;

 private:
  struct Source {
    const HfWeights::Tensor* tensor = nullptr;
    bool transposed = false;
    std::int64_t rows = 0;  // strata's shape [rows, cols]
    std::int64_t cols = 0;
    std::int64_t unpadded_numel = 0;  // the elements the file holds; the rest are padding
  };
  HfWeights weights_;
  std::vector<Source> sources_;  // by tensor index
};

}  // namespace strata::models
