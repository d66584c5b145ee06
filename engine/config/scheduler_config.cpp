// scheduler {type, params} with deepspeed/runtime/lr_schedules.py's names and defaults.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "engine/config/sections.h"

namespace strata::engine {

const char* to_string(SchedulerType type) {
  switch (type) {
    case SchedulerType::none:
      return "none";
    case SchedulerType::warmup_lr:
      return "WarmupLR";
    case SchedulerType::warmup_decay_lr:
      return "WarmupDecayLR";
    case SchedulerType::warmup_cosine_lr:
      return "WarmupCosineLR";
    case SchedulerType::one_cycle:
      return "OneCycle";
  }
  return "?";
}

const char* to_string(WarmupType type) {
  return type == WarmupType::log ? "log" : "linear";
}

namespace detail {
namespace {

const std::vector<std::string_view> warmup_params = {
    "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"};
const std::vector<std::string_view> warmup_decay_params = {
    "warmup_min_lr", "warmup_max_lr",        "warmup_num_steps",
    "warmup_type",   "last_batch_iteration", "total_num_steps"};
const std::vector<std::string_view> warmup_cosine_params = {
    "total_num_steps", "warmup_min_ratio", "warmup_num_steps",
    "cos_min_ratio",   "warmup_type",      "last_batch_iteration"};
const std::vector<std::string_view> one_cycle_params = {"cycle_min_lr",
                                                        "cycle_max_lr",
                                                        "decay_lr_rate",
                                                        "cycle_first_step_size",
                                                        "cycle_second_step_size",
                                                        "cycle_first_stair_count",
                                                        "cycle_second_stair_count",
                                                        "decay_step_size",
                                                        "cycle_momentum",
                                                        "cycle_min_mom",
                                                        "cycle_max_mom",
                                                        "decay_mom_rate",
                                                        "last_batch_iteration"};

const std::vector<std::string_view>& params_of(SchedulerType type) {
  switch (type) {
    case SchedulerType::warmup_decay_lr:
      return warmup_decay_params;
    case SchedulerType::warmup_cosine_lr:
      return warmup_cosine_params;
    case SchedulerType::one_cycle:
      return one_cycle_params;
    default:
      return warmup_params;
  }
}

void read_type(JsonReader& section, SchedulerType& type) {
  const nlohmann::json* value = section.find("type");
  if (section.is_auto("type")) {
    section.error("type",
                  "got \"auto\", which has no default here; name one of \"WarmupLR\", "
                  "\"WarmupDecayLR\", \"WarmupCosineLR\", \"OneCycle\", or remove the "
                  "scheduler section for a constant lr");
    return;
  }
  if (value == nullptr) {
    section.error("type",
                  "missing; expected one of \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\", "
                  "\"OneCycle\"");
    return;
  }
  if (*value == "LRRangeTest") {
    section.unsupported("type", "the LR range test is a tuning run, not a training schedule",
                        "use WarmupLR, WarmupDecayLR, WarmupCosineLR or OneCycle");
    return;
  }
  section.read_enum("type", type,
                    {{"WarmupLR", SchedulerType::warmup_lr},
                     {"WarmupDecayLR", SchedulerType::warmup_decay_lr},
                     {"WarmupCosineLR", SchedulerType::warmup_cosine_lr},
                     {"OneCycle", SchedulerType::one_cycle}});
}

// Params of other schedule types are named as such rather than as typos.
void refuse_foreign_params(JsonReader& params, SchedulerType type) {
  const auto& own = params_of(type);
  for (const auto* list : {&warmup_decay_params, &warmup_cosine_params, &one_cycle_params}) {
    for (std::string_view key : *list) {
      if (std::find(own.begin(), own.end(), key) != own.end() || !params.has(key)) continue;
      params.error(key, fmt::format("is not a parameter of {} (it takes {}); remove it",
                                    to_string(type), fmt::join(own, ", ")));
    }
  }
}

void read_warmup(JsonReader& params, const OptimizerConfig& optimizer, SchedulerConfig& out) {
  params.read("warmup_min_lr", out.warmup_min_lr, RealRange{0, 1e300}, 0.0);
  out.warmup_max_lr = optimizer.lr;
  params.read("warmup_max_lr", out.warmup_max_lr, RealRange{0, 1e300}, optimizer.lr);
  if (out.warmup_max_lr < out.warmup_min_lr)
    params.error("warmup_max_lr", fmt::format("{} is below warmup_min_lr {}; the warmup must rise",
                                              out.warmup_max_lr, out.warmup_min_lr));
}

void read_total_steps(JsonReader& params, const StrataConfig& strata, SchedulerConfig& out) {
  if (!params.has("total_num_steps")) {
    params.error("total_num_steps",
                 fmt::format("missing; {} needs it (\"auto\" uses strata.train_steps)",
                             to_string(out.type)));
    return;
  }
  params.read("total_num_steps", out.total_num_steps, IntRange{1, INT64_MAX}, strata.train_steps);
}

void read_one_cycle(JsonReader& params, SchedulerConfig& out) {
  for (std::string_view key : {"cycle_min_lr", "cycle_max_lr"}) {
    if (!params.has(key))
      params.error(key, "missing; OneCycle needs cycle_min_lr and cycle_max_lr");
    else if (params.is_auto(key))
      params.error(key,
                   "got \"auto\", which has no default here (the HF Trainer does not fill "
                   "it); give the learning rate");
  }
  params.read("cycle_min_lr", out.cycle_min_lr, RealRange{0, 1e300});
  params.read("cycle_max_lr", out.cycle_max_lr, RealRange{0, 1e300});
  params.read("decay_lr_rate", out.decay_lr_rate, RealRange{0, 1e300});
  params.read("cycle_first_step_size", out.cycle_first_step_size, IntRange{1, INT64_MAX});
  out.cycle_second_step_size = out.cycle_first_step_size;
  std::optional<std::int64_t> second;
  params.read("cycle_second_step_size", second, IntRange{1, INT64_MAX});
  if (second) out.cycle_second_step_size = *second;
  params.read("cycle_first_stair_count", out.cycle_first_stair_count, IntRange{0, INT64_MAX});
  out.cycle_second_stair_count = out.cycle_first_stair_count;
  std::optional<std::int64_t> second_stairs;
  params.read("cycle_second_stair_count", second_stairs, IntRange{0, INT64_MAX});
  if (second_stairs) out.cycle_second_stair_count = *second_stairs;
  params.read("decay_step_size", out.decay_step_size, IntRange{0, INT64_MAX});
  params.read("cycle_momentum", out.cycle_momentum);
  params.read("cycle_min_mom", out.cycle_min_mom, RealRange{0, 1});
  params.read("cycle_max_mom", out.cycle_max_mom, RealRange{0, 1});
  params.read("decay_mom_rate", out.decay_mom_rate, RealRange{0, 1e300});
  if (out.cycle_max_lr < out.cycle_min_lr)
    params.error("cycle_max_lr", fmt::format("{} is below cycle_min_lr {}; the cycle must rise",
                                             out.cycle_max_lr, out.cycle_min_lr));
}

void read_params(JsonReader& params, const OptimizerConfig& optimizer, const StrataConfig& strata,
                 SchedulerConfig& out) {
  refuse_foreign_params(params, out.type);
  const bool warmup = out.type != SchedulerType::one_cycle;
  const bool total =
      out.type == SchedulerType::warmup_decay_lr || out.type == SchedulerType::warmup_cosine_lr;
  if (total) read_total_steps(params, strata, out);
  if (out.type == SchedulerType::warmup_lr || out.type == SchedulerType::warmup_decay_lr)
    read_warmup(params, optimizer, out);
  if (warmup) {
    std::int64_t auto_steps = total ? std::min<std::int64_t>(1000, out.total_num_steps) : 1000;
    params.read("warmup_num_steps", out.warmup_num_steps, IntRange{0, INT64_MAX}, auto_steps);
    params.read_enum("warmup_type", out.warmup_type,
                     {{"log", WarmupType::log}, {"linear", WarmupType::linear}});
  }
  if (out.type == SchedulerType::warmup_cosine_lr) {
    params.read("warmup_min_ratio", out.warmup_min_ratio, RealRange{0, 1});
    params.read("cos_min_ratio", out.cos_min_ratio, RealRange{0, 1});
  }
  if (out.type == SchedulerType::one_cycle) read_one_cycle(params, out);
  params.read("last_batch_iteration", out.last_batch_iteration, IntRange{-1, INT64_MAX});
  if (total && out.warmup_num_steps > out.total_num_steps) {
    params.diagnostics().warnings.push_back(fmt::format(
        "scheduler.params: warmup_num_steps {} exceeds total_num_steps {}; the decay never starts",
        out.warmup_num_steps, out.total_num_steps));
  }
  params.finish();
}

}  // namespace

void read_scheduler(JsonReader& top, const OptimizerConfig& optimizer, const StrataConfig& strata,
                    SchedulerConfig& out) {
  JsonReader section(top.find("scheduler"), "scheduler", top.diagnostics());
  if (!section.present()) return;
  SchedulerType type = SchedulerType::none;
  read_type(section, type);
  out.type = type;
  JsonReader params(section.find("params"), "scheduler.params", top.diagnostics());
  if (type != SchedulerType::none) read_params(params, optimizer, strata, out);
  section.finish();
}

}  // namespace detail
}  // namespace strata::engine
