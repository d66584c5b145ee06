#include "gpu/counting/counting_device.h"

#include <sys/mman.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "base/round_up.h"
#include "gpu/event.h"
#include "gpu/stream.h"

namespace strata::gpu::counting {
namespace {

constexpr std::int64_t kPageBytes = 4096;

// Complete once recorded, and before: a counting stream has no work to wait for.
class CountingEvent final : public Event {
 public:
  void synchronize() const override {}
  bool query() const override { return true; }
  double elapsed_ms(const Event&) const override { return 0.0; }
};

}  // namespace

// Mappings with no access and no backing: the address space a buffer would take, and nothing
// else. A touch faults (SIGSEGV) rather than reading memory that does not hold the buffer.
class CountingDevice::AddressSpace final : public detail::AllocationOwner {
 public:
  AddressSpace(MemoryLedger& ledger, bool page_rounded)
      : ledger_(ledger), page_rounded_(page_rounded) {}

  void* map(std::int64_t bytes, std::string_view what) {
    STRATA_ASSERT(bytes > 0);
    ledger_.add(counted(bytes), what);
    void* data = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (data == MAP_FAILED) {
      const int error = errno;
      ledger_.remove(counted(bytes));
      throw UserError(fmt::format("the counting device could not reserve {} bytes of address "
                                  "space for {}: {}",
                                  bytes, what, std::strerror(error)),
                      "plan a smaller model or fewer ranks: a plan maps every buffer the step "
                      "holds at once, and the process's address space (ulimit -v) is the limit");
    }
    return data;
  }

  void release(void* data, std::int64_t bytes) noexcept override {
    ::munmap(data, static_cast<std::size_t>(bytes));
    ledger_.remove(counted(bytes));
  }

 private:
  // Pinned memory counts in locked bytes, whole pages, as the host backend counts it.
  std::int64_t counted(std::int64_t bytes) const {
    return page_rounded_ ? base::round_up(bytes, kPageBytes) : bytes;
  }

  MemoryLedger& ledger_;
  bool page_rounded_;
};

class CountingDevice::CountingStream final : public Stream {
 public:
  // `device` is set for a stream from create_stream: it registers there while it lives.
  CountingStream(std::string name, SharedTransferCounters& counters,
                 CountingDevice* device = nullptr)
      : name_(std::move(name)), counters_(counters), device_(device) {
    if (device_) device_->add_created_stream(*this);
  }
  ~CountingStream() override {
    if (device_) device_->remove_created_stream(*this);
  }

  std::string_view name() const override { return name_; }
  void copy(void* target, const void* source, std::int64_t bytes, CopyKind kind) override {
    STRATA_ASSERT(bytes >= 0 && (bytes == 0 || (target != nullptr && source != nullptr)));
    counters_.add(kind, bytes);
  }
  void fill_zero(void* target, std::int64_t bytes) override {
    STRATA_ASSERT(bytes >= 0 && (bytes == 0 || target != nullptr));
  }
  void launch(HostTask task) override {
    if (!task.is_kernel()) ++host_functions_;
  }
  std::int64_t host_functions() const override { return host_functions_; }
  void record(Event&) override {}
  void wait(const Event&) override {}

 protected:
  std::exception_ptr drain() override { return nullptr; }

 private:
  std::string name_;
  SharedTransferCounters& counters_;
  CountingDevice* device_;
  std::atomic<std::int64_t> host_functions_ = 0;
};

CountingDevice::CountingDevice()
    : device_ledger_("counting device", LedgerKind::device,
                     std::numeric_limits<std::int64_t>::max()),
      pinned_ledger_("counting device", LedgerKind::pinned),
      device_space_(std::make_unique<AddressSpace>(device_ledger_, false)),
      pinned_space_(std::make_unique<AddressSpace>(pinned_ledger_, true)),
      compute_(std::make_unique<CountingStream>("compute", counters_)),
      h2d_(std::make_unique<CountingStream>("h2d", counters_)),
      d2h_(std::make_unique<CountingStream>("d2h", counters_)) {}

CountingDevice::~CountingDevice() {
  expect_no_created_streams();
}

DeviceBuffer CountingDevice::allocate(std::int64_t bytes, std::string_view what) {
  STRATA_ASSERT(bytes >= 0);
  if (bytes == 0) return {};
  return DeviceBuffer(device_space_->map(bytes, what), bytes, device_space_.get());
}

PinnedBuffer CountingDevice::allocate_pinned(std::int64_t bytes) {
  STRATA_ASSERT(bytes >= 0);
  if (bytes == 0) return {};
  return PinnedBuffer(pinned_space_->map(bytes, "pinned memory"), bytes, pinned_space_.get());
}

std::unique_ptr<Stream> CountingDevice::create_stream(std::string_view name) {
  return std::make_unique<CountingStream>(std::string(name), counters_, this);
}

std::unique_ptr<Event> CountingDevice::create_event() {
  return std::make_unique<CountingEvent>();
}

}  // namespace strata::gpu::counting
