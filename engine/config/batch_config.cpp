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
std::optional<std::int64_t> read_batch_key(JsonReader& top, std::string_view key, bool& was_auto) {
  if (top.is_auto(key)) {
    was_auto = true;
    return std::nullopt;
  }
  std::optional<std::int64_t> value;
  top.read(key, value, IntRange{1, std::int64_t{1} << 40});
  return value;
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

}  // namespace

void read_batch(JsonReader& top, int world_size, BatchConfig& out) {
  bool any_auto = false;
  auto errors_before = top.diagnostics().errors.size();
  auto train = read_batch_key(top, train_key, any_auto);
  auto micro = read_batch_key(top, micro_key, any_auto);
  auto gas = read_batch_key(top, gas_key, any_auto);
  if (top.diagnostics().errors.size() != errors_before) return;  // a bad value was named already
  const std::int64_t world = world_size;
  BatchConfig batch;
  if (train && micro && gas) {
    batch = {*train, *micro, *gas};
  } else if (train && micro) {
    batch = {*train, *micro, *train / *micro / world};
  } else if (train && gas) {
    batch = {*train, *train / world / *gas, *gas};
  } else if (micro && gas) {
    batch = {*micro * *gas * world, *micro, *gas};
  } else if (train) {
    batch = {*train, *train / world, 1};
  } else if (micro) {
    batch = {*micro * world, *micro, 1};
  } else if (any_auto) {
    // Every batch key was "auto" or absent: one sample per GPU per micro-step.
    std::int64_t steps = gas.value_or(1);
    batch = {steps * world, 1, steps};
  } else {
    top.diagnostics().errors.push_back(fmt::format(
        "{}: Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided; add "
        "\"train_micro_batch_size_per_gpu\": 1 (or the batch you want)",
        train_key));
    return;
  }
  check_batch(top, world_size, batch);
  out = batch;
}

}  // namespace strata::engine::detail
