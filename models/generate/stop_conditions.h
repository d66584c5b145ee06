#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::models::generate {

// Why a generation ended.
enum class StopReason { eos, stop_string, max_new_tokens };

// "eos", "stop string", "max_new_tokens": for the user.
std::string_view to_string(StopReason reason);

// What ends one generation: an end-of-sequence id (any of them), a stop string appearing in the
// generated text (not the prompt's), or the budget of new tokens. The text shown stops before a
// stop string, and while the text's end could still grow into one, that end is held back.
class StopConditions {
 public:
  // `max_new_tokens` > 0; empty stop strings are refused by the caller.
  StopConditions(std::vector<std::int32_t> eos_ids, std::vector<std::string> stop_strings,
                 std::int64_t max_new_tokens);

  // After the `new_tokens`-th new token `id`, with `text` all the generated text so far (whole
  // characters): why to stop now, if so. An end id first, then a stop string, then the budget.
  std::optional<StopReason> after(std::int32_t id, std::string_view text,
                                  std::int64_t new_tokens) const;

  // How much of `text` may be shown: all of it before the first stop string in it; else all but
  // its longest end that begins some stop string (it may yet complete one). `finished`: nothing
  // more comes, so only a stop string is held back.
  std::size_t shown(std::string_view text, bool finished) const;

  bool is_eos(std::int32_t id) const;

 private:
  std::vector<std::int32_t> eos_ids_;
  std::vector<std::string> stop_strings_;
  std::int64_t max_new_tokens_;
};

}  // namespace strata::models::generate
