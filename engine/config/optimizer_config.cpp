// optimizer {type, params}: DeepSpeed's names (matched case-insensitively, as DeepSpeed lowercases
// them) and the defaults of DeepSpeed's CPU optimizers (DeepSpeedCPUAdam, CPUAdagrad, CPULion).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "engine/config/sections.h"

namespace strata::engine {

const char* to_string(OptimizerType type) {
  switch (type) {
    case OptimizerType::adam:
      return "Adam";
    case OptimizerType::adamw:
      return "AdamW";
    case OptimizerType::adagrad:
      return "Adagrad";
    case OptimizerType::lion:
      return "Lion";
  }
  return "?";
}

namespace detail {
namespace {

const std::initializer_list<EnumName<OptimizerType>> optimizer_names = {
    {"Adam", OptimizerType::adam},
    {"AdamW", OptimizerType::adamw},
    {"Adagrad", OptimizerType::adagrad},
    {"Lion", OptimizerType::lion},
};

// DeepSpeed optimizers (and torch.optim names DeepSpeed passes through) that strata does not run.
const std::vector<std::string> unsupported_optimizers = {
    "lamb",  "onebitadam", "zerooneadam", "onebitlamb", "muadam", "muadamw",
    "musgd", "muon",       "sgd",         "rmsprop",    "adamax", "adadelta",
    "nadam", "radam",      "lbfgs",       "sparseadam", "asgd",   "rprop",
};

// The params each type takes; a param of another type is named as such, not as a typo.
std::vector<std::string_view> params_of(OptimizerType type) {
  switch (type) {
    case OptimizerType::adam:
    case OptimizerType::adamw:
      return {"lr",      "betas",       "eps",       "weight_decay", "bias_correction",
              "amsgrad", "adam_w_mode", "torch_adam"};
    case OptimizerType::adagrad:
      return {"lr", "eps", "weight_decay"};
    case OptimizerType::lion:
      return {"lr", "betas", "weight_decay"};
  }
  return {};
}

void read_type(JsonReader& section, OptimizerType& type) {
  const nlohmann::json* value = section.find("type");
  if (section.is_auto("type")) {
    section.error("type",
                  "got \"auto\", which has no default here (DeepSpeed builds no optimizer "
                  "from it); name one of \"Adam\", \"AdamW\", \"Adagrad\", \"Lion\"");
    return;
  }
  if (value == nullptr) {
    section.error("type", "missing; expected one of \"Adam\", \"AdamW\", \"Adagrad\", \"Lion\"");
    return;
  }
  if (value->is_string()) {
    std::string name = lowercase(value->get<std::string>());
    if (std::find(unsupported_optimizers.begin(), unsupported_optimizers.end(), name) !=
        unsupported_optimizers.end()) {
      section.unsupported("type", "strata's CPU optimizers are Adam, AdamW, Adagrad and Lion",
                          "use \"AdamW\" (or Adam, Adagrad, Lion)");
      return;
    }
  }
  section.read_enum("type", type, optimizer_names, true);
}

void read_betas(JsonReader& params, std::array<double, 2>& betas) {
  const nlohmann::json* value = params.find("betas");
  if (value == nullptr) return;
  if (params.is_auto("betas")) {
    params.note_auto("betas", fmt::format("[{}, {}]", betas[0], betas[1]),
                     "as the HF Trainer fills it");
    return;
  }
  bool valid = value->is_array() && value->size() == 2;
  std::array<double, 2> read = betas;
  for (std::size_t i = 0; valid && i < 2; ++i) {
    auto number = (*value)[i].is_boolean() ? std::nullopt : json_to_real((*value)[i]);
    valid = number && *number >= 0 && *number < 1;
    if (valid) read[i] = *number;
  }
  if (!valid) {
    params.bad_value("betas", "two numbers in [0, 1), e.g. [0.9, 0.999]");
    return;
  }
  betas = read;
}

// lr: strata.lr stands for the HF Trainer's learning_rate. It fills an "auto" or absent lr and
// must agree with one given outright.
void read_lr(JsonReader& params, const StrataConfig& strata, OptimizerConfig& out) {
  if (params.is_auto("lr")) {
    out.lr = strata.lr.value_or(out.lr);
    params.note_auto("lr", fmt::format("{}", out.lr),
                     strata.lr ? "from strata.lr" : "the optimizer's default; set strata.lr");
    return;
  }
  if (!params.has("lr")) {
    out.lr = strata.lr.value_or(out.lr);
    return;
  }
  params.read("lr", out.lr, RealRange{0, 1e300});
  if (strata.lr && *strata.lr != out.lr)
    params.error("lr", fmt::format("{} differs from strata.lr {}; give one of them (or write "
                                   "\"auto\" here)",
                                   out.lr, *strata.lr));
}

void read_params(JsonReader& params, const StrataConfig& strata, OptimizerConfig& out) {
  const auto own = params_of(out.type);
  const OptimizerConfig defaults = out;
  for (std::string_view key : {"lr", "betas", "eps", "weight_decay", "bias_correction", "amsgrad",
                               "adam_w_mode", "torch_adam"}) {
    if (std::find(own.begin(), own.end(), key) != own.end() || !params.has(key)) continue;
    params.error(key, fmt::format("is not a parameter of {} (it takes {}); remove it",
                                  to_string(out.type), fmt::join(own, ", ")));
  }
  auto owns = [&own](std::string_view key) {
    return std::find(own.begin(), own.end(), key) != own.end();
  };
  read_lr(params, strata, out);
  if (owns("betas")) read_betas(params, out.betas);
  if (owns("eps")) params.read("eps", out.eps, RealRange{0, 1e300}, defaults.eps);
  params.read("weight_decay", out.weight_decay, RealRange{0, 1e300}, defaults.weight_decay);
  if (owns("bias_correction")) {
    params.read("bias_correction", out.bias_correction);
    bool amsgrad = false;
    params.read("amsgrad", amsgrad);
    if (amsgrad)
      params.unsupported("amsgrad", "AMSGrad",
                         "set it to false (DeepSpeed's CPU Adam lacks it too)");
    params.read("adam_w_mode", out.adam_w_mode);
    params.read("torch_adam", out.torch_adam);
  }
  if (out.type == OptimizerType::adamw && !out.adam_w_mode) {
    params.diagnostics().warnings.push_back(
        "optimizer.params.adam_w_mode: false has no effect with type AdamW (DeepSpeed also "
        "runs AdamW); use type \"Adam\" with adam_w_mode false for L2-regularized Adam");
    out.adam_w_mode = true;
  }
  if (params.has("max_grad_norm")) {
    params.error("max_grad_norm",
                 "'max_grad_norm' is not supported as an optimizer parameter, please switch to "
                 "using the deepspeed parameter 'gradient_clipping'");
  }
  params.finish();
}

}  // namespace

void read_optimizer(JsonReader& top, const StrataConfig& strata, OptimizerConfig& out) {
  JsonReader section(top.find("optimizer"), "optimizer", top.diagnostics());
  if (!section.present()) {
    out.lr = strata.lr.value_or(out.lr);
    return;
  }
  const auto errors_before = top.diagnostics().errors.size();
  read_type(section, out.type);
  if (top.diagnostics().errors.size() != errors_before) {
    // Params of a type strata does not run would only add noise to the one message that matters.
    section.accept({"params"});
    section.finish();
    return;
  }
  if (out.type == OptimizerType::adagrad) {
    out.lr = 1e-2;
    out.eps = 1e-10;
  }
  if (out.type == OptimizerType::adamw) out.adam_w_mode = true;
  JsonReader params(section.find("params"), "optimizer.params", top.diagnostics());
  read_params(params, strata, out);
  section.finish();
}

}  // namespace detail
}  // namespace strata::engine
