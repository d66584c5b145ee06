#include "aio/options.h"

#include <fmt/format.h>

#include <cstdlib>

#include "base/error.h"

namespace strata::aio {
namespace {

std::string_view environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string_view{} : std::string_view{value};
}

void check(bool ok, std::string_view field, std::int64_t value, std::string_view allowed) {
  if (ok) return;
  throw UserError(fmt::format("aio option {}={} is out of range", field, value),
                  fmt::format("use {} for {}", allowed, field), 2);
}

}  // namespace

std::string_view to_string(Backend backend) {
  switch (backend) {
    case Backend::automatic:
      return "auto";
    case Backend::io_uring:
      return "io_uring";
    case Backend::thread_pool:
      return "threads";
  }
  return "?";
}

std::string_view to_string(DirectMode mode) {
  switch (mode) {
    case DirectMode::required:
      return "required";
    case DirectMode::optional:
      return "optional";
    case DirectMode::off:
      return "off";
  }
  return "?";
}

EngineOptions apply_environment(EngineOptions options) {
  std::string_view backend = environment("STRATA_AIO_BACKEND");
  if (backend == "auto")
    options.backend = Backend::automatic;
  else if (backend == "io_uring")
    options.backend = Backend::io_uring;
  else if (backend == "threads")
    options.backend = Backend::thread_pool;
  else if (!backend.empty()) {
    throw UserError(fmt::format("STRATA_AIO_BACKEND={} is not a backend", backend),
                    "set STRATA_AIO_BACKEND to auto, io_uring or threads, or unset it", 2);
  }
  std::string_view direct = environment("STRATA_AIO_DIRECT");
  if (direct == "required")
    options.direct = DirectMode::required;
  else if (direct == "optional")
    options.direct = DirectMode::optional;
  else if (direct == "off")
    options.direct = DirectMode::off;
  else if (!direct.empty()) {
    throw UserError(fmt::format("STRATA_AIO_DIRECT={} is not a direct-I/O mode", direct),
                    "set STRATA_AIO_DIRECT to required, optional or off, or unset it", 2);
  }
  return options;
}

void validate(const EngineOptions& options) {
  check(options.block_size_bytes >= 4096 && options.block_size_bytes % 4096 == 0 &&
            options.block_size_bytes <= (std::int64_t{1} << 30),
        "block_size", options.block_size_bytes, "a multiple of 4096 between 4K and 1G");
  check(options.queue_depth >= 1 && options.queue_depth <= 4096, "queue_depth", options.queue_depth,
        "1..4096");
  check(options.thread_count >= 1 && options.thread_count <= 256, "thread_count",
        options.thread_count, "1..256");
  check(options.tickets_max >= 1 && options.tickets_max <= (1 << 20), "tickets_max",
        options.tickets_max, "1..1048576");
}

}  // namespace strata::aio
