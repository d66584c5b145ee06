// strata: the settings DeepSpeed has no key for (model shape, data, run length, GPU budget);
// strata.checkpoint is read in checkpoint_config.cpp.
#include <fmt/format.h>

#include <cctype>

#include "base/units.h"
#include "engine/config/sections.h"

namespace strata::engine::detail {
namespace {

void read_model(JsonReader& strata, ModelConfig& out) {
  JsonReader model(strata.find("model"), "strata.model", strata.diagnostics());
  model.read("n_layer", out.n_layer, IntRange{1, 4096});
  model.read("n_head", out.n_head, IntRange{1, 4096});
  model.read("d_model", out.d_model, IntRange{1, 1 << 20});
  model.read("seq_len", out.seq_len, IntRange{1, 1 << 24});
  model.read("vocab", out.vocab, IntRange{2, 1 << 24});
  if (out.d_model % out.n_head != 0) {
    model.error("d_model", fmt::format("{} is not a multiple of n_head {}; each head takes "
                                       "d_model / n_head channels: choose an n_head that "
                                       "divides d_model (heads of 64 channels are usual)",
                                       out.d_model, out.n_head));
  }
  model.finish();
}

void read_data(JsonReader& strata, DataConfig& out) {
  JsonReader data(strata.find("data"), "strata.data", strata.diagnostics());
  data.read("path", out.path);
  data.read("validation_path", out.validation_path);
  data.read("validation_fraction", out.validation_fraction, RealRange{0, 0.5, true});
  if (data.read("dtype", out.dtype) && !out.dtype.empty() && out.dtype != "uint16" &&
      out.dtype != "uint32") {
    data.bad_value("dtype", "\"uint16\" or \"uint32\" (the width of a raw token array's ids)");
  }
  data.read_enum("order", out.order,
                 {{"random", DataOrder::random}, {"sequential", DataOrder::sequential}});
  data.finish();
}

// Bytes as an integer or as a string with a binary suffix ("512MiB", "2G").
void read_budget(JsonReader& strata, std::int64_t& out) {
  const nlohmann::json* value = strata.find("device_memory_budget");
  if (value == nullptr) return;
  if (strata.is_auto("device_memory_budget")) {
    strata.note_auto("device_memory_budget", std::to_string(out), "strata's default");
    return;
  }
  std::optional<std::int64_t> bytes;
  if (value->is_string()) bytes = base::parse_bytes(value->get<std::string>());
  if (!value->is_string() && !value->is_boolean()) bytes = json_to_int(*value);
  if (!bytes || *bytes < 0) {
    strata.bad_value("device_memory_budget",
                     "a byte count >= 0 (0 = the whole device), e.g. 268435456 or \"256MiB\"");
    return;
  }
  out = *bytes;
}

}  // namespace

void read_strata(JsonReader& top, StrataConfig& out, CheckpointConfig& checkpoint) {
  JsonReader strata(top.find("strata"), "strata", top.diagnostics());
  read_model(strata, out.model);
  read_data(strata, out.data);
  read_checkpoint_schedule(strata, checkpoint);
  std::int64_t seed = static_cast<std::int64_t>(out.seed);
  strata.read("seed", seed, IntRange{0, INT64_MAX});
  out.seed = static_cast<std::uint64_t>(seed);
  strata.read("train_steps", out.train_steps, IntRange{1, INT64_MAX});
  read_budget(strata, out.device_memory_budget);
  strata.read("overlap_optimizer", out.overlap_optimizer);
  strata.read("micro_batch_size", out.micro_batch_size, IntRange{1, std::int64_t{1} << 40});
  if (strata.has("lr") && !strata.find("lr")->is_null() && !strata.is_auto("lr")) {
    double lr = 0;
    const auto errors_before = strata.diagnostics().errors.size();
    strata.read("lr", lr, RealRange{0, 1e300});
    if (strata.diagnostics().errors.size() == errors_before) out.lr = lr;
  }
  strata.read("job_name", out.job_name);
  bool name_ok = !out.job_name.empty() && out.job_name.size() <= 64;
  for (char c : out.job_name)
    name_ok = name_ok &&
              (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  if (!name_ok || out.job_name == "." || out.job_name == "..") {
    strata.bad_value("job_name",
                     "1 to 64 letters, digits, '-', '_' or '.' (it names the swap directory)");
  }
  strata.finish();
}

}  // namespace strata::engine::detail
