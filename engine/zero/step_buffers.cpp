#include "engine/zero/step_buffers.h"

#include <array>
#include <utility>

namespace strata::engine::zero {
namespace {

// What follows the module's name; none is the end of another.
constexpr std::array<std::pair<StepBuffer, std::string_view>, 4> kSuffixes{{
    {StepBuffer::gathered_params, " gathered parameters"},
    {StepBuffer::gradients, " gradients"},
    {StepBuffer::gradient_shard, " gradient shard"},
    {StepBuffer::gradient_bucket, " gradient bucket"},
}};

}  // namespace

std::string step_buffer_name(StepBuffer kind, std::string_view module) {
  for (const auto& [suffix_kind, suffix] : kSuffixes)
    if (suffix_kind == kind) return std::string(module).append(suffix);
  return std::string(module);
}

std::optional<NamedStepBuffer> parse_step_buffer(std::string_view name) {
  for (const auto& [kind, suffix] : kSuffixes) {
    if (name.size() > suffix.size() && name.ends_with(suffix))
      return NamedStepBuffer{kind, name.substr(0, name.size() - suffix.size())};
  }
  return std::nullopt;
}

}  // namespace strata::engine::zero
