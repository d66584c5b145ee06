// DeepSpeed's batch rule (deepspeed/runtime/config.py, _set_batch_related_parameters and
// _batch_assertion): train_batch_size = micro * gradient_accumulation_steps * world_size, any two
// give the third with integer division, and the check afterwards catches what did not divide.
#include <fmt/format.h>

#include "engine/config/sections.h"

namespace strata::engine::detail {
namespace {

constexpr std::string_view train_key = "train_batch_size";
constexpr std::string_view micro_key = "train_micro_batch_size_per_gpu";
constexpr std::string_view gas_key = "gradient_accumulation_steps";

// A batch key as given: a positive integer, or nullopt when absent, null or "auto" (DeepSpeed
// drops "auto" keys, Hugging Face fills them in; strata resolves them by the rule below).
struct BatchKey {
  std::optional<std::int64_t> value;
  bool was_auto = false;
};

BatchKey read_batch_key(JsonReader& top, std::string_view key) {
  BatchKey read{std::nullopt, top.is_auto(key)};
  if (!read.was_auto) top.read(key, read.value, IntRange{1, std::int64_t{1} << 40});
  return read;
}

// strata.micro_batch_size stands for the HF Trainer's per_device_train_batch_size: it fills an
// "auto" micro-batch (Accelerate's configs write "auto" there too).
void apply_strata_micro(const StrataConfig& strata, BatchKey& micro) {
  if (strata.micro_batch_size && micro.was_auto) micro.value = strata.micro_batch_size;
}

// A micro-batch given outright, or derived from the other two, must agree with
// strata.micro_batch_size when both are there.
void check_strata_micro(JsonReader& top, const StrataConfig& strata, const BatchKey& micro,
                        const BatchConfig& batch) {
  if (!strata.micro_batch_size || micro.was_auto ||
      batch.train_micro_batch_size_per_gpu == *strata.micro_batch_size)
    return;
  top.error(micro_key,
            fmt::format("{} ({}) differs from strata.micro_batch_size {}; give one of them (or "
                        "write \"auto\" here)",
                        batch.train_micro_batch_size_per_gpu,
                        micro.value ? "given" : "from train_batch_size and the others",
                        *strata.micro_batch_size));
}

// One note per "auto" batch key: the value it became and why.
void note_auto_keys(JsonReader& top, const StrataConfig& strata, const BatchConfig& batch,
                    const BatchKey& train, const BatchKey& micro, const BatchKey& gas) {
  if (train.was_auto)
    top.note_auto(train_key, std::to_string(batch.train_batch_size),
                  "micro-batch x gradient_accumulation_steps x world size, as the HF Trainer "
                  "fills it");
  if (micro.was_auto) {
    const char* how = strata.micro_batch_size ? "from strata.micro_batch_size"
                      : train.value
                          ? "train_batch_size / (gradient_accumulation_steps x world size)"
                          : "strata's default; set strata.micro_batch_size";
    top.note_auto(micro_key, std::to_string(batch.train_micro_batch_size_per_gpu), how);
  }
  if (gas.was_auto)
    top.note_auto(gas_key, std::to_string(batch.gradient_accumulation_steps),
                  "from the other two, or 1, as the HF Trainer fills it");
}

// DeepSpeed's assertions, worded as DeepSpeed words them.
void check_batch(JsonReader& top, int world_size, const BatchConfig& batch) {
  auto& errors = top.diagnostics().errors;
  if (batch.train_batch_size <= 0)
    errors.push_back(fmt::format("{}: Train batch size: {} has to be greater than 0", train_key,
                                 batch.train_batch_size));
  if (batch.train_micro_batch_size_per_gpu <= 0)
    errors.push_back(fmt::format("{}: Micro batch size per gpu: {} has to be greater than 0",
                                 micro_key, batch.train_micro_batch_size_per_gpu));
  if (batch.gradient_accumulation_steps <= 0)
    errors.push_back(fmt::format("{}: Gradient accumulation steps: {} has to be greater than 0",
                                 gas_key, batch.gradient_accumulation_steps));
  if (batch.train_batch_size !=
      batch.train_micro_batch_size_per_gpu * batch.gradient_accumulation_steps * world_size) {
    errors.push_back(fmt::format(
        "{}: Check batch related parameters. train_batch_size is not equal to "
        "micro_batch_per_gpu * gradient_acc_step * world_size {} != {} * {} * {}; give values "
        "that multiply out (or give only two of the three)",
        train_key, batch.train_batch_size, batch.train_micro_batch_size_per_gpu,
        batch.gradient_accumulation_steps, world_size));
  }
}

// DeepSpeed's _set_batch_related_parameters: any two give the third; one alone sets the
// accumulation to 1. nullopt when neither train_batch_size nor the micro-batch is known.
std::optional<BatchConfig> resolve(std::optional<std::int64_t> train,
                                   std::optional<std::int64_t> micro,
                                   std::optional<std::int64_t> gas, int world_size, bool any_auto) {
  const std::int64_t world = world_size;
  if (train && micro && gas) return BatchConfig{*train, *micro, *gas};
  if (train && micro) return BatchConfig{*train, *micro, *train / *micro / world};
  if (train && gas) return BatchConfig{*train, *train / world / *gas, *gas};
  if (micro && gas) return BatchConfig{*micro * *gas * world, *micro, *gas};
  if (train) return BatchConfig{*train, *train / world, 1};
  if (micro) return BatchConfig{*micro * world, *micro, 1};
  if (!any_auto) return std::nullopt;
  // Every batch key was "auto" or absent: one sample per GPU per micro-step.
  const std::int64_t steps = gas.value_or(1);
  return BatchConfig{steps * world, 1, steps};
}

}  // namespace

void read_batch(JsonReader& top, int world_size, const StrataConfig& strata, BatchConfig& out) {
  auto errors_before = top.diagnostics().errors.size();
  BatchKey train = read_batch_key(top, train_key);
  BatchKey micro = read_batch_key(top, micro_key);
  BatchKey gas = read_batch_key(top, gas_key);
  apply_strata_micro(strata, micro);
  if (top.diagnostics().errors.size() != errors_before) return;  // a bad value was named already
  const bool any_auto = train.was_auto || micro.was_auto || gas.was_auto;
  auto batch = resolve(train.value, micro.value, gas.value, world_size, any_auto);
  if (!batch) {
    top.diagnostics().errors.push_back(fmt::format(
        "{}: Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided; add "
        "\"train_micro_batch_size_per_gpu\": 1 (or the batch you want)",
        train_key));
    return;
  }
  check_batch(top, world_size, *batch);
  check_strata_micro(top, strata, micro, *batch);
  note_auto_keys(top, strata, *batch, train, micro, gas);
  out = *batch;
}

}  // namespace strata::engine::detail
