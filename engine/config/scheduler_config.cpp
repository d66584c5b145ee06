// scheduler {type, params} with deepspeed/runtime/lr_schedules.py's names and defaults.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

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

// The formulas are engine/optim/lr_schedule.cpp's (DeepSpeed's lr_schedules.py), solved for the
// first iteration of the lr's final stretch at 0; lr_schedule_test checks the two agree. The
// config loader may not call the optimizer's code (it builds alone, for the fuzzer), hence here.
std::optional<std::int64_t> lr_zero_from_iteration(const SchedulerConfig& scheduler,
                                                   const OptimizerConfig& optimizer) {
  // DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR warm up over max(2, warmup_num_steps).
  const std::int64_t warmup = std::max<std::int64_t>(2, scheduler.warmup_num_steps);
  switch (scheduler.type) {
    case SchedulerType::warmup_decay_lr:
      // min + (max - min) x max(0, (T - i) / max(1, T - W)) for i >= W: min from max(T, W) on.
      if (scheduler.warmup_min_lr > 0 || scheduler.warmup_max_lr <= 0) return std::nullopt;
      return std::max(scheduler.total_num_steps, warmup);
    case SchedulerType::warmup_cosine_lr: {
      // Ratio cos_min_ratio once (i - W + 1) / max(1, T - W) reaches 1, for i >= W.
      if (scheduler.cos_min_ratio > 0 || optimizer.lr <= 0) return std::nullopt;
      const std::int64_t span = std::max<std::int64_t>(1, scheduler.total_num_steps - warmup);
      return std::max(warmup, warmup - 1 + span);
    }
    case SchedulerType::one_cycle: {
      // cycle_min_lr at the cycle's end (batch F + S, iteration F + S - 1) and after it. With
      // stairs the second half reaches its last stair, floor((F + S - batch) x stairs / S) = 0,
      // ceil(S / stairs) batches before the end.
      if (scheduler.cycle_min_lr > 0 || scheduler.cycle_max_lr <= 0) return std::nullopt;
      const std::int64_t second = scheduler.cycle_second_step_size;
      const std::int64_t stairs = scheduler.cycle_second_stair_count;
      const std::int64_t last_stair = stairs > 0 ? (second + stairs - 1) / stairs : 1;
      return scheduler.cycle_first_step_size + second - last_stair;
    }
    case SchedulerType::none:
    case SchedulerType::warmup_lr:
      break;
  }
  return std::nullopt;
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

// "auto": the run's steps, as the HF Trainer fills it from num_training_steps
// (HfTrainerDeepSpeedConfig.trainer_config_finalize).
void read_total_steps(JsonReader& params, RunLength run, SchedulerConfig& out) {
  if (!params.has("total_num_steps")) {
    params.error(
        "total_num_steps",
        fmt::format("missing; {} needs it (\"auto\" uses the run's steps)", to_string(out.type)));
    return;
  }
  if (params.is_auto("total_num_steps")) {
    out.total_num_steps = run.steps;
    params.note_auto("total_num_steps", std::to_string(run.steps),
                     run.from_command_line ? "the run's steps, from --steps"
                                           : "the run's steps, strata.train_steps");
    return;
  }
  params.read("total_num_steps", out.total_num_steps, IntRange{1, INT64_MAX});
}

// The HF Trainer's TrainingArguments.get_warmup_steps(num_training_steps): warmup_steps when above
// 0, else ceil(num_training_steps x warmup_ratio); both default to 0.
std::int64_t trainer_warmup_steps(const StrataConfig& strata, std::int64_t run_steps) {
  if (strata.warmup_steps.value_or(0) > 0) return *strata.warmup_steps;
  return static_cast<std::int64_t>(
      std::ceil(static_cast<double>(run_steps) * strata.warmup_ratio.value_or(0.0)));
}

// Where an "auto" warm-up came from, for its note.
std::string warmup_source(const StrataConfig& strata, RunLength run) {
  if (strata.warmup_steps.value_or(0) > 0) return "strata.warmup_steps";
  if (strata.warmup_ratio.value_or(0.0) > 0)
    return fmt::format("strata.warmup_ratio {} x {} steps, rounded up", *strata.warmup_ratio,
                       run.steps);
  return "no warm-up; set strata.warmup_steps or warmup_ratio";
}

// "auto" is filled as the Trainer fills it. strata.warmup_steps or warmup_ratio, when given, also
// fill a key left out (as strata.lr fills a missing lr), and must agree with a value written
// outright (the Trainer's fill_match refuses a mismatch too).
void read_warmup_steps(JsonReader& params, const StrataConfig& strata, RunLength run,
                       SchedulerConfig& out) {
  const std::int64_t trainer_steps = trainer_warmup_steps(strata, run.steps);
  const bool strata_keys = strata.warmup_steps || strata.warmup_ratio;
  if (params.is_auto("warmup_num_steps")) {
    out.warmup_num_steps = trainer_steps;
    params.note_auto("warmup_num_steps", std::to_string(trainer_steps), warmup_source(strata, run));
    return;
  }
  if (!params.read("warmup_num_steps", out.warmup_num_steps, IntRange{0, INT64_MAX})) {
    if (strata_keys) out.warmup_num_steps = trainer_steps;
    return;
  }
  if (strata_keys && out.warmup_num_steps != trainer_steps) {
    params.error("warmup_num_steps",
                 fmt::format("{} differs from {}, what {} gives; give one of them (or write "
                             "\"auto\" here)",
                             out.warmup_num_steps, trainer_steps,
                             strata.warmup_steps.value_or(0) > 0 ? "strata.warmup_steps"
                                                                 : "strata.warmup_ratio"));
  }
}

// The run's step (1 = its first) that runs at DeepSpeed's last_batch_iteration `iteration`: the
// n-th step runs at last_batch_iteration + n - 1 (engine/optim/lr_schedule.h).
std::int64_t step_at_iteration(const SchedulerConfig& scheduler, std::int64_t iteration) {
  return std::max<std::int64_t>(1, iteration - scheduler.last_batch_iteration + 1);
}

// What keeps a schedule's lr above 0 to the end, for the warning.
std::string zero_lr_fix(const SchedulerConfig& scheduler, std::int64_t run_steps) {
  switch (scheduler.type) {
    case SchedulerType::warmup_decay_lr:
      return fmt::format(
          "total_num_steps {}, warmup_min_lr 0; set total_num_steps to \"auto\" "
          "or {}, or warmup_min_lr above 0",
          scheduler.total_num_steps, run_steps);
    case SchedulerType::warmup_cosine_lr:
      return fmt::format(
          "total_num_steps {}, cos_min_ratio 0; set total_num_steps to \"auto\" "
          "or {}, or cos_min_ratio above 0",
          scheduler.total_num_steps, run_steps);
    default:
      return fmt::format(
          "the cycle of {} steps ends at cycle_min_lr 0; set cycle_min_lr above "
          "0, or lengthen the cycle",
          scheduler.cycle_first_step_size + scheduler.cycle_second_step_size);
  }
}

// DeepSpeed trains on, at lr 0, past a schedule's end; a run that does so learns nothing in those
// steps, which is worth saying before it starts.
void warn_if_lr_reaches_zero(JsonReader& params, const OptimizerConfig& optimizer, RunLength run,
                             const SchedulerConfig& out) {
  const std::optional<std::int64_t> iteration = lr_zero_from_iteration(out, optimizer);
  if (!iteration) return;
  const std::int64_t step = step_at_iteration(out, *iteration);
  if (step > run.steps) return;
  params.diagnostics().warnings.push_back(fmt::format(
      "scheduler: {} reaches lr 0 at step {} and stays there to the run's last step {} ({})",
      to_string(out.type), step, run.steps, zero_lr_fix(out, run.steps)));
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
                 RunLength run, SchedulerConfig& out) {
  refuse_foreign_params(params, out.type);
  const bool warmup = out.type != SchedulerType::one_cycle;
  const bool total =
      out.type == SchedulerType::warmup_decay_lr || out.type == SchedulerType::warmup_cosine_lr;
  if (total) read_total_steps(params, run, out);
  if (out.type == SchedulerType::warmup_lr || out.type == SchedulerType::warmup_decay_lr)
    read_warmup(params, optimizer, out);
  if (warmup) {
    read_warmup_steps(params, strata, run, out);
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
  if (params.diagnostics().errors.empty()) warn_if_lr_reaches_zero(params, optimizer, run, out);
  params.finish();
}

}  // namespace

void read_scheduler(JsonReader& top, const OptimizerConfig& optimizer, const StrataConfig& strata,
                    RunLength run, SchedulerConfig& out) {
  JsonReader section(top.find("scheduler"), "scheduler", top.diagnostics());
  if (!section.present()) return;
  SchedulerType type = SchedulerType::none;
  read_type(section, type);
  out.type = type;
  JsonReader params(section.find("params"), "scheduler.params", top.diagnostics());
  if (type != SchedulerType::none) read_params(params, optimizer, strata, run, out);
  section.finish();
}

}  // namespace detail
}  // namespace strata::engine
