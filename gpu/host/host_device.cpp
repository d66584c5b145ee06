#include "gpu/host/host_device.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/units.h"

namespace strata::gpu::host {
namespace {

constexpr const char* host_device_name = "host (emulated GPU)";

}  // namespace

// A stream from create_stream: a HostStream that the device knows about while it lives, so that
// Device::synchronize drains it too.
class HostDevice::CreatedStream final : public Stream {
 public:
  CreatedStream(HostDevice& device, std::string name)
      : device_(device),
        stream_(std::move(name), device.memory_, device.counters_, device.queue_depth_) {
    std::lock_guard lock(device_.streams_mutex_);
    device_.created_streams_.push_back(&stream_);
  }
  // Forgotten first, then `stream_` drains and joins as it is destroyed.
  ~CreatedStream() override { device_.forget(&stream_); }

  std::string_view name() const override { return stream_.name(); }
  void copy(void* target, const void* source, std::int64_t bytes, CopyKind kind) override {
    stream_.copy(target, source, bytes, kind);
  }
  void fill_zero(void* target, std::int64_t bytes) override { stream_.fill_zero(target, bytes); }
  void launch(HostTask task) override { stream_.launch(std::move(task)); }
  std::int64_t host_functions() const override { return stream_.host_functions(); }
  void record(Event& event) override { stream_.record(event); }
  void wait(const Event& event) override { stream_.wait(event); }
  void synchronize() override { stream_.synchronize(); }

 private:
  HostDevice& device_;
  HostStream stream_;
};

std::int64_t default_host_budget_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  STRATA_ASSERT(pages > 0 && page_size > 0);
  return static_cast<std::int64_t>(pages) * page_size / 2;
}

namespace {

std::int64_t checked_budget(std::int64_t configured_bytes) {
  if (configured_bytes < 0) {
    throw UserError(fmt::format("strata.device_memory_budget is {} bytes: it must be positive",
                                configured_bytes),
                    "set strata.device_memory_budget to a byte count such as 4294967296 or "
                    "\"4G\", or leave it out for the device's own size",
                    2);
  }
  return configured_bytes == 0 ? default_host_budget_bytes() : configured_bytes;
}

}  // namespace

HostDevice::HostDevice(const DeviceOptions& options)
    : queue_depth_(options.stream_queue_depth),
      memory_(host_device_name, checked_budget(options.memory_budget_bytes)),
      pinned_(host_device_name) {
  STRATA_ASSERT(queue_depth_ > 0);
  compute_ = std::make_unique<HostStream>("compute", memory_, counters_, queue_depth_);
  h2d_ = std::make_unique<HostStream>("h2d", memory_, counters_, queue_depth_);
  d2h_ = std::make_unique<HostStream>("d2h", memory_, counters_, queue_depth_);
  base::logger("gpu").debug("host device opened: budget={} queue_depth={}",
                            base::format_bytes(static_cast<double>(memory_.budget_bytes())),
                            queue_depth_);
}

HostDevice::~HostDevice() {
  compute_.reset();
  h2d_.reset();
  d2h_.reset();
  std::lock_guard lock(streams_mutex_);
  if (!created_streams_.empty()) {
    base::logger("gpu").critical("host device destroyed while {} created streams are still live",
                                 created_streams_.size());
  }
  STRATA_ASSERT(created_streams_.empty());
}

std::string HostDevice::name() const {
  return host_device_name;
}

DeviceBuffer HostDevice::allocate(std::int64_t bytes, std::string_view what) {
  return memory_.allocate(bytes, what);
}

PinnedBuffer HostDevice::allocate_pinned(std::int64_t bytes) {
  return pinned_.allocate(bytes);
}

std::unique_ptr<Stream> HostDevice::create_stream(std::string_view name) {
  return std::make_unique<CreatedStream>(*this, std::string(name));
}

std::unique_ptr<Event> HostDevice::create_event() {
  return std::make_unique<HostEvent>();
}

void HostDevice::synchronize() {
  std::exception_ptr first_error;
  auto drain = [&first_error](HostStream& stream) {
    std::exception_ptr error = stream.drain();
    if (error && !first_error) first_error = std::move(error);
  };
  drain(*compute_);
  drain(*h2d_);
  drain(*d2h_);
  {
    // Held while draining, so that no created stream is destroyed half-way; a task running on a
    // stream must therefore not create or destroy streams while the host synchronizes the device.
    std::lock_guard lock(streams_mutex_);
    for (HostStream* stream : created_streams_)
      drain(*stream);
  }
  if (first_error) std::rethrow_exception(first_error);
}

void HostDevice::forget(HostStream* stream) noexcept {
  std::lock_guard lock(streams_mutex_);
  auto found = std::find(created_streams_.begin(), created_streams_.end(), stream);
  STRATA_ASSERT(found != created_streams_.end());
  created_streams_.erase(found);
}

}  // namespace strata::gpu::host
