// libFuzzer target: arbitrary bytes through the JSON parser and the config loader. The only
// acceptable outcomes are a loaded config or a ConfigError; any other exception, a crash, a leak
// or undefined behaviour is a bug. A loaded config must also survive to_json and read back to
// the same JSON (the round trip `strata config check` relies on).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/config/config.h"
#include "engine/config/config_error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace strata::engine;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // The first byte also picks a world size, so that the batch rule sees more than one.
  int world_size = size == 0 ? 1 : 1 + data[0] % 8;
  try {
    LoadedConfig loaded = parse_config_text(text, "fuzz", world_size);
    nlohmann::json resolved = to_json(loaded.config);
    LoadedConfig again = parse_config(resolved, world_size);
    if (to_json(again.config) != resolved) std::abort();
  } catch (const ConfigError&) {
    // Refused with a message: the expected outcome for most inputs.
  }
  return 0;
}
