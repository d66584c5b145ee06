#include "models/generate/stop_conditions.h"

#include <algorithm>
#include <utility>

#include "base/assert.h"

namespace strata::models::generate {
namespace {

// Where the first stop string in `text` starts, or npos.
std::size_t first_stop(std::string_view text, const std::vector<std::string>& stop_strings) {
  std::size_t first = std::string_view::npos;
  for (const std::string& stop : stop_strings)
    first = std::min(first, text.find(stop));
  return first;
}

}  // namespace

std::string_view to_string(StopReason reason) {
  switch (reason) {
    case StopReason::eos:
      return "eos";
    case StopReason::stop_string:
      return "stop string";
    case StopReason::max_new_tokens:
      return "max_new_tokens";
  }
  return "?";
}

StopConditions::StopConditions(std::vector<std::int32_t> eos_ids,
                               std::vector<std::string> stop_strings, std::int64_t max_new_tokens)
    : eos_ids_(std::move(eos_ids)),
      stop_strings_(std::move(stop_strings)),
      max_new_tokens_(max_new_tokens) {
  STRATA_ASSERT(max_new_tokens_ > 0);
  for (const std::string& stop : stop_strings_)
    STRATA_ASSERT(!stop.empty());
}

bool StopConditions::is_eos(std::int32_t id) const {
  return std::ranges::find(eos_ids_, id) != eos_ids_.end();
}

std::optional<StopReason> StopConditions::after(std::int32_t id, std::string_view text,
                                                std::int64_t new_tokens) const {
  if (is_eos(id)) return StopReason::eos;
  if (first_stop(text, stop_strings_) != std::string_view::npos) return StopReason::stop_string;
  if (new_tokens >= max_new_tokens_) return StopReason::max_new_tokens;
  return std::nullopt;
}

std::size_t StopConditions::shown(std::string_view text, bool finished) const {
  const std::size_t stop = first_stop(text, stop_strings_);
  if (stop != std::string_view::npos) return stop;
  if (finished) return text.size();
  std::size_t held = 0;  // the longest end of `text` that begins a stop string
  for (const std::string& stop_string : stop_strings_) {
    for (std::size_t length = std::min(stop_string.size() - 1, text.size()); length > held;
         --length) {
      if (text.ends_with(std::string_view(stop_string).substr(0, length))) {
        held = length;
        break;
      }
    }
  }
  return text.size() - held;
}

}  // namespace strata::models::generate
