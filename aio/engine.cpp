#include "aio/engine.h"

#include "aio/detail/engine_core.h"
#include "aio/detail/file_state.h"
#include "base/assert.h"

namespace strata::aio {

Engine::Engine(EngineOptions options, FaultPlan faults, std::span<std::byte> registered)
    : core_(std::make_unique<detail::EngineCore>(options, std::move(faults), registered)) {}

Engine::~Engine() = default;

File Engine::open(const std::filesystem::path& path, OpenMode mode) const {
  FileOptions file_options;
  file_options.direct = core_->options().direct;
  file_options.verify_checksums = core_->options().verify_checksums;
  file_options.faults = &core_->faults();
  return File::open(path, mode, file_options);
}

Ticket Engine::submit_read(File& file, std::int64_t offset, std::span<std::byte> target) {
  STRATA_ASSERT(file.is_open());
  auto id = core_->submit(true, *file.state(), offset, target.data(),
                          static_cast<std::int64_t>(target.size()));
  return Ticket(id.slot, id.generation);
}

Ticket Engine::submit_write(File& file, std::int64_t offset, std::span<const std::byte> source) {
  STRATA_ASSERT(file.is_open());
  // The engine never writes into a write's buffer; the core's pieces share one pointer type.
  auto* data = const_cast<std::byte*>(source.data());
  auto id =
      core_->submit(false, *file.state(), offset, data, static_cast<std::int64_t>(source.size()));
  return Ticket(id.slot, id.generation);
}

void Engine::wait(Ticket ticket) {
  STRATA_ASSERT(ticket.valid());
  core_->wait(ticket.slot_, ticket.generation_);
}

void Engine::wait_all() {
  core_->wait_all();
}

Backend Engine::backend() const noexcept {
  return core_->backend();
}
const EngineOptions& Engine::options() const noexcept {
  return core_->options();
}
EngineStats Engine::stats() const noexcept {
  return core_->stats();
}
LatencyHistogram& Engine::latency() noexcept {
  return core_->latency();
}

}  // namespace strata::aio
