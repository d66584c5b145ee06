#include "engine/checkpoint/model_match.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <vector>

#include "base/error.h"
#include "base/units.h"

namespace strata::engine::checkpoint {
namespace {

using nlohmann::json;

// "key value" for each key of `object` that is a number, in `keys` order.
std::string shape_keys(const json& object, std::initializer_list<const char*> keys) {
  std::vector<std::string> parts;
  for (const char* key : keys) {
    const auto found = object.find(key);
    if (found != object.end() && found->is_number_integer())
      parts.push_back(fmt::format("{} {}", key, found->get<std::int64_t>()));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The rows of a token table that are tokens: all of them without padding.
std::int64_t token_rows(const ManifestTensor& tensor) {
  return tensor.unpadded_rows > 0 ? tensor.unpadded_rows : tensor.shape.front();
}

// A table saved with its vocabulary's rows alone where this model pads it (a checkpoint saved
// before strata padded its token tables): the same model, but its files hold fewer elements.
bool is_unpadded_table(const ManifestTensor& saved, const ManifestTensor& model) {
  return model.unpadded_rows > 0 && saved.unpadded_rows == 0 &&
         saved.shape == model.unpadded_shape();
}

// Refuses `saved` for `model`'s tensor of the same name when they differ in shape or, for a padded
// table, in the rows that are tokens.
void check_tensor(const ManifestTensor& saved, const ManifestTensor& model,
                  const std::filesystem::path& path, const std::string& holds,
                  const std::string& fix) {
  if (is_unpadded_table(saved, model)) {
    throw UserError(
        fmt::format("{}: tensor \"{}\" is [{}] in the checkpoint, a row per token, but [{}] in "
                    "this model, which pads its token tables to a multiple of 128 rows: the "
                    "checkpoint was saved by a strata that did not pad them",
                    path.string(), model.name, fmt::join(saved.shape, ", "),
                    fmt::join(model.shape, ", ")),
        fmt::format("export its weights with `strata ckpt export {} --hf DIR` and start a new "
                    "run from them with \"strata\": {{\"model\": {{\"from_pretrained\": "
                    "\"DIR\"}}}} (the optimizer's moments start anew), or resume it with the "
                    "strata that saved it",
                    path.parent_path().string()),
        2);
  }
  if (saved.shape != model.shape) {
    throw UserError(
        fmt::format("{}: tensor \"{}\" is [{}] in the checkpoint but [{}] in this model: {}",
                    path.string(), model.name, fmt::join(saved.shape, ", "),
                    fmt::join(model.shape, ", "), holds),
        fix, 2);
  }
  if (!model.shape.empty() && token_rows(saved) != token_rows(model)) {
    throw UserError(fmt::format("{}: tensor \"{}\" holds {} tokens' rows in the checkpoint but "
                                "{} in this model (both padded to [{}]): {}",
                                path.string(), model.name, token_rows(saved), token_rows(model),
                                fmt::join(model.shape, ", "), holds),
                    fix, 2);
  }
}

}  // namespace

std::string describe_model(const Manifest& manifest) {
  const std::string count = fmt::format(
      "{} parameters", base::format_count(static_cast<double>(manifest.parameter_count())));
  const json& hf = manifest.model_config;
  if (hf.is_object()) {
    const std::string type = hf.value("model_type", std::string("Hugging Face"));
    const std::string shape =
        type == "gpt2" ? shape_keys(hf, {"n_embd", "n_layer", "n_head", "vocab_size"})
                       : shape_keys(hf, {"hidden_size", "num_hidden_layers", "num_attention_heads",
                                         "num_key_value_heads", "vocab_size"});
    return fmt::format("a {} model ({}; {})", type, shape, count);
  }
  const json* model = nullptr;
  if (manifest.config.is_object() && manifest.config.contains("strata") &&
      manifest.config["strata"].contains("model"))
    model = &manifest.config["strata"]["model"];
  if (model != nullptr && model->is_object()) {
    return fmt::format("strata's GPT (strata.model {}; {})",
                       shape_keys(*model, {"n_layer", "n_head", "d_model", "seq_len", "vocab"}),
                       count);
  }
  return fmt::format("a model of {} tensors ({})", manifest.tensors.size(), count);
}

void check_model(const Manifest& manifest, const std::filesystem::path& checkpoint,
                 std::span<const ManifestTensor> model) {
  const std::filesystem::path path = checkpoint / kManifestName;
  std::map<std::string, const ManifestTensor*> saved;
  for (const ManifestTensor& tensor : manifest.tensors)
    saved[tensor.name] = &tensor;
  const std::string holds = fmt::format("the checkpoint holds {}", describe_model(manifest));
  const std::string fix =
      "resume with the model config the checkpoint was saved with (its strata.model: `strata ckpt "
      "inspect` prints it), or start a new run without --resume";
  for (const ManifestTensor& tensor : model) {
    const auto found = saved.find(tensor.name);
    if (found == saved.end()) {
      throw UserError(fmt::format("{}: this model's tensor \"{}\" is not in the checkpoint: {}",
                                  path.string(), tensor.name, holds),
                      fix, 2);
    }
    check_tensor(*found->second, tensor, path, holds, fix);
    saved.erase(found);
  }
  if (!saved.empty()) {
    throw UserError(fmt::format("{}: the checkpoint holds tensor \"{}\", which this model does "
                                "not have: {}",
                                path.string(), saved.begin()->first, holds),
                    fix, 2);
  }
}

}  // namespace strata::engine::checkpoint
