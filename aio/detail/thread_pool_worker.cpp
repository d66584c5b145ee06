// The fallback where io_uring cannot be set up: queue_depth threads per ring, each doing one
// blocking pread/pwrite at a time, so the same number of requests is in flight.
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <vector>

#include "aio/detail/engine_core.h"
#include "aio/detail/file_state.h"
#include "base/timeline.h"

namespace strata::aio::detail {
namespace {

class ThreadPoolWorker final : public Worker {
 public:
  ThreadPoolWorker(EngineCore& core, int ring_index) : core_(core), queue_(core.queue(ring_index)) {
    threads_.reserve(static_cast<std::size_t>(core.options().queue_depth));
    for (int i = 0; i < core.options().queue_depth; ++i) {
      threads_.emplace_back([this] { serve(); });
    }
  }
  // jthread members join; the core stopped the queue first.
  ~ThreadPoolWorker() override = default;

 private:
  void serve() {
    for (;;) {
      Piece piece;
      if (queue_.take(piece, /*block=*/true) == WorkQueue::Take::stopped) return;
      if (core_.slot(piece.slot).failed.load(std::memory_order_relaxed)) {
        core_.cancel(piece);
        continue;
      }
      Request request{piece, 0, 0, 0};
      while (transfer(request) == EngineCore::Next::resubmit) {
      }
    }
  }

  // One pread/pwrite of what is left of the request; the core bounds the resubmissions.
  EngineCore::Next transfer(Request& request) {
    const TicketSlot& ticket = core_.slot(request.piece.slot);
    std::byte* data = request.piece.data + request.done_bytes;
    auto length = static_cast<std::size_t>(request.piece.length_bytes - request.done_bytes);
    off_t offset = request.piece.offset + request.done_bytes;
    const bool record = core_.options().record_latency;
    const bool timed = base::timeline().recording();
    const auto begin = timed ? base::Timeline::Clock::now() : base::Timeline::Clock::time_point();
    std::int64_t start = record ? EngineCore::now_ns() : 0;
    ssize_t result = ticket.is_read ? ::pread(ticket.file->fd, data, length, offset)
                                    : ::pwrite(ticket.file->fd, data, length, offset);
    std::int64_t outcome = result < 0 ? -errno : result;
    if (record) core_.latency().record(EngineCore::now_ns() - start);
    if (timed) {
      base::timeline().add(ticket.is_read ? "nvme read" : "nvme write", "", begin,
                           base::Timeline::Clock::now());
    }
    core_.requests.fetch_add(1, std::memory_order_relaxed);
    return core_.complete(request, outcome);
  }

  EngineCore& core_;
  WorkQueue& queue_;
  std::vector<std::jthread> threads_;
};

}  // namespace

std::unique_ptr<Worker> make_thread_pool_worker(EngineCore& core, int ring_index) {
  return std::make_unique<ThreadPoolWorker>(core, ring_index);
}

}  // namespace strata::aio::detail
