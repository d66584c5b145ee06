#pragma once

// The top-level keys of DeepSpeed's config that strata does not act on. They are DeepSpeed's own
// (deepspeed/runtime/constants.py and the sections its engine reads), so a config that carries
// them is a valid DeepSpeed config: each one set to something other than its "off" value gets a
// warning naming it as a DeepSpeed feature strata ignores and what that changes for the run,
// instead of the "unknown key" warning (with its "did you mean") that a typo gets.

#include "engine/config/json_reader.h"

namespace strata::engine::detail {

// Marks every ignored DeepSpeed key of `top` known, warning for each one that is on; refuses
// those whose absence would change what is trained beyond recognition (Apex AMP).
void read_ignored_deepspeed_keys(JsonReader& top);

}  // namespace strata::engine::detail
