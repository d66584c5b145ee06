#include "gpu/host/host_device.h"

#include <fmt/format.h>
#include <unistd.h>

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
    device_.add_created_stream(stream_);
  }
  // Forgotten first, then `stream_` drains and joins as it is destroyed.
  ~CreatedStream() override { device_.remove_created_stream(stream_); }

  std::string_view name() const override { return stream_.name(); }
  void copy(void* target, const void* source, std::int64_t bytes, CopyKind kind) override {
    stream_.copy(target, source, bytes, kind);
  }
  void fill_zero(void* target, std::int64_t bytes) override { stream_.fill_zero(target, bytes); }
  void launch(HostTask task) override { stream_.launch(std::move(task)); }
  std::int64_t host_functions() const override { return stream_.host_functions(); }
  void record(Event& event) override { stream_.record(event); }
  void wait(const Event& event) override { stream_.wait(event); }
  std::exception_ptr drain() override { return stream_.drain(); }

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
  expect_no_created_streams();
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

}  // namespace strata::gpu::host
