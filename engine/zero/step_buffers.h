#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace strata::engine::zero {

// The buffers a step takes from its device memory (memory::StreamOrderedMemory) and gives back,
// by what they hold: a module's gathered parameters (the coordinator's), and its gradient buffer,
// reduced shard and packed bucket (the reducer's).
enum class StepBuffer { gathered_params, gradients, gradient_shard, gradient_bucket };

// The name a step buffer of module `module` is allocated under: the budget's error says it, and
// the memory estimate reads the parts of the step's peak back from it (parse_step_buffer).
std::string step_buffer_name(StepBuffer kind, std::string_view module);

struct NamedStepBuffer {
  StepBuffer kind;
  std::string_view module;  // a view into the parsed name
};
// step_buffer_name's inverse; nullopt for a name it does not make.
std::optional<NamedStepBuffer> parse_step_buffer(std::string_view name);

}  // namespace strata::engine::zero
