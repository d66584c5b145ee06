// One io_uring ring and the thread that owns it: only that thread touches the ring (set-up,
// buffer registration, submission, reaping), as Seastar's reactor backend does.
#include <liburing.h>
#include <sys/uio.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "aio/detail/engine_core.h"
#include "aio/detail/file_state.h"
#include "base/assert.h"
#include "base/log.h"
#include "base/timeline.h"

namespace strata::aio::detail {
namespace {

// The kernel caps one registered buffer at 1 GiB, so a larger region is registered in pieces.
constexpr std::int64_t fixed_buffer_bytes_max = std::int64_t{1} << 30;

class UringWorker final : public Worker {
 public:
  UringWorker(EngineCore& core, int ring_index, std::span<std::byte> registered)
      : core_(core),
        queue_(core.queue(ring_index)),
        options_(core.options()),
        registered_(registered),
        requests_(static_cast<std::size_t>(options_.queue_depth)),
        reaped_(static_cast<std::size_t>(options_.queue_depth)),
        cqes_(static_cast<std::size_t>(options_.queue_depth)) {
    free_.reserve(requests_.size());
    retry_.reserve(requests_.size());
    whole_.reserve(requests_.size());
    for (std::size_t i = requests_.size(); i-- > 0;)
      free_.push_back(static_cast<std::uint32_t>(i));
  }

  ~UringWorker() override {
    if (thread_.joinable()) thread_.join();  // the core stopped the queue and drained first
  }

  // Starts the thread, which sets the ring up; returns 0 or the errno of a refused set-up.
  int start() {
    std::promise<int> setup;
    std::future<int> result = setup.get_future();
    thread_ = std::jthread([this, &setup] { run(setup); });
    int setup_errno = result.get();
    if (setup_errno != 0) thread_.join();
    return setup_errno;
  }

 private:
  void run(std::promise<int>& setup_promise) {
    int result = setup();
    setup_promise.set_value(result);
    if (result != 0) return;
    loop();
    io_uring_queue_exit(&ring_);
  }

  // Tries the cheapest completion mode first: one issuer and task work run only when we wait
  // (Linux 6.1+), then cooperative task work (5.19+), then the plain ring.
  int setup() {
    const unsigned flag_sets[] = {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
                                  IORING_SETUP_COOP_TASKRUN, 0};
    int result = -EINVAL;
    for (unsigned flags : flag_sets) {
      io_uring_params params{};
      params.flags = flags;
      result =
          io_uring_queue_init_params(static_cast<unsigned>(options_.queue_depth), &ring_, &params);
      if (result != -EINVAL) break;
    }
    if (result < 0) return -result;
    register_buffers();
    return 0;
  }

  void register_buffers() {
    if (registered_.empty()) return;
    std::vector<iovec> vectors;
    for (std::int64_t start = 0; start < static_cast<std::int64_t>(registered_.size());
         start += fixed_buffer_bytes_max) {
      std::int64_t length = std::min<std::int64_t>(
          fixed_buffer_bytes_max, static_cast<std::int64_t>(registered_.size()) - start);
      vectors.push_back({registered_.data() + start, static_cast<std::size_t>(length)});
    }
    int result =
        io_uring_register_buffers(&ring_, vectors.data(), static_cast<unsigned>(vectors.size()));
    if (result == 0) {
      fixed_ = true;
      return;
    }
    static std::once_flag warned;
    std::call_once(warned, [result] {
      base::logger("aio").warn(
          "io_uring refused to register the buffer region ({}): requests pin pages one by one "
          "(raise `ulimit -l` to register them)",
          strerrorname_np(-result));
    });
  }

  // The registered-buffer index holding [data, data + length), or -1.
  int fixed_index(const std::byte* data, std::int64_t length) const {
    if (!fixed_ || data < registered_.data()) return -1;
    std::int64_t start = data - registered_.data();
    if (start + length > static_cast<std::int64_t>(registered_.size())) return -1;
    std::int64_t index = start / fixed_buffer_bytes_max;
    if ((start + length - 1) / fixed_buffer_bytes_max != index) return -1;
    return static_cast<int>(index);
  }

  void loop() {
    for (;;) {
      bool stopped = fill(true);
      if (inflight_ == 0) {
        if (stopped) return;
        continue;
      }
      int result = io_uring_submit_and_wait(&ring_, 1);
      if (result < 0 && result != -EINTR && result != -EAGAIN && result != -EBUSY) {
        // Only a bug (a bad ring fd, bad SQE memory) makes io_uring_enter itself fail here.
        base::logger("aio").critical("io_uring_submit_and_wait failed: {}", std::strerror(-result));
        STRATA_ASSERT(result >= 0);
      }
      reap();
    }
  }

  // Prepares resubmissions, then new pieces, up to queue_depth in flight. With overlap_events
  // off, a new batch starts only once the previous one is fully reaped. Blocks for work only
  // when nothing is in flight and `may_block`. Returns true once the queue has stopped.
  bool fill(bool may_block) {
    if (!options_.overlap_events && inflight_ > 0) return false;
    std::int64_t now = timing() ? EngineCore::now_ns() : 0;
    while (!retry_.empty()) {
      std::uint32_t index = retry_.back();
      retry_.pop_back();
      prepare(index, now);
    }
    while (!free_.empty()) {
      Piece piece;
      bool block = may_block && inflight_ == 0;
      WorkQueue::Take taken = queue_.take(piece, block);
      if (taken == WorkQueue::Take::stopped) return true;
      if (taken == WorkQueue::Take::empty) break;
      if (core_.slot(piece.slot).failed.load(std::memory_order_relaxed)) {
        core_.cancel(piece);  // the first error of this transfer is already recorded
        continue;
      }
      if (block && timing()) now = EngineCore::now_ns();
      std::uint32_t index = free_.back();
      free_.pop_back();
      requests_[index] = Request{piece, 0, 0, 0};
      prepare(index, now);
    }
    return false;
  }

  // Submission times are taken for the latency histogram and for the timeline.
  bool timing() const { return options_.record_latency || base::timeline().recording(); }

  // A request's span from submission to reaped completion, on the timeline's NVMe lanes.
  void record_span(const Request& request, std::int64_t now) const {
    using Clock = base::Timeline::Clock;
    const bool read = core_.slot(request.piece.slot).is_read;
    base::timeline().add(read ? "nvme read" : "nvme write", "",
                         Clock::time_point(std::chrono::nanoseconds(request.submitted_ns)),
                         Clock::time_point(std::chrono::nanoseconds(now)));
  }

  void prepare(std::uint32_t index, std::int64_t now) {
    Request& request = requests_[index];
    const TicketSlot& ticket = core_.slot(request.piece.slot);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    STRATA_ASSERT(sqe != nullptr);  // the SQ holds queue_depth entries, inflight <= queue_depth
    std::byte* data = request.piece.data + request.done_bytes;
    std::int64_t length = request.piece.length_bytes - request.done_bytes;
    auto offset = static_cast<std::uint64_t>(request.piece.offset + request.done_bytes);
    int fd = ticket.file->fd;
    int buffer = fixed_index(data, length);
    auto count = static_cast<unsigned>(length);
    if (ticket.is_read && buffer >= 0) {
      io_uring_prep_read_fixed(sqe, fd, data, count, offset, buffer);
    } else if (ticket.is_read) {
      io_uring_prep_read(sqe, fd, data, count, offset);
    } else if (buffer >= 0) {
      io_uring_prep_write_fixed(sqe, fd, data, count, offset, buffer);
    } else {
      io_uring_prep_write(sqe, fd, data, count, offset);
    }
    io_uring_sqe_set_data64(sqe, index);
    request.submitted_ns = now;
    ++inflight_;
    core_.requests.fetch_add(1, std::memory_order_relaxed);
    if (buffer >= 0) core_.fixed_requests.fetch_add(1, std::memory_order_relaxed);
    if (options_.single_submit) (void)io_uring_submit(&ring_);  // a failure is retried at wait
  }

  // Takes every completion there is, frees the CQ, then handles them. A piece that came back
  // whole (the common case) only frees its request here; the freed requests are refilled and
  // submitted first, and only then are those pieces checksummed and finished, so the device keeps
  // queue_depth requests while this thread runs CRC32C over what came back (tens of
  // microseconds per MiB) and wakes waiters. Anything else (short, EAGAIN, an error, a
  // planned fault) is handled at once by EngineCore::complete.
  void reap() {
    unsigned count =
        io_uring_peek_batch_cqe(&ring_, cqes_.data(), static_cast<unsigned>(cqes_.size()));
    for (unsigned i = 0; i < count; ++i) {
      reaped_[i] = {static_cast<std::uint32_t>(io_uring_cqe_get_data64(cqes_[i])), cqes_[i]->res};
    }
    io_uring_cq_advance(&ring_, count);
    std::int64_t now = timing() ? EngineCore::now_ns() : 0;
    whole_.clear();
    for (unsigned i = 0; i < count; ++i) {
      auto [index, result] = reaped_[i];
      STRATA_ASSERT(index < requests_.size());
      Request& request = requests_[index];
      if (options_.record_latency) core_.latency().record(now - request.submitted_ns);
      // A request submitted before the timeline started has no submission time.
      if (request.submitted_ns > 0 && base::timeline().recording()) record_span(request, now);
      --inflight_;
      if (core_.completes_whole(request, result)) {
        whole_.push_back(request.piece);
        free_.push_back(index);
      } else if (core_.complete(request, result) == EngineCore::Next::resubmit) {
        retry_.push_back(index);
      } else {
        free_.push_back(index);
      }
    }
    if (whole_.empty()) return;
    // Never blocks: the pieces in whole_ are unfinished, and their waiters may be all the work
    // there is. The queue cannot have stopped either, for the same reason.
    (void)fill(false);
    // A refused submission (EAGAIN, EBUSY) leaves the entries in the SQ for the loop's next
    // io_uring_submit_and_wait, which also reports anything worse.
    if (io_uring_sq_ready(&ring_) > 0) (void)io_uring_submit(&ring_);
    for (const Piece& piece : whole_)
      core_.finish_whole(piece);
  }

  EngineCore& core_;
  WorkQueue& queue_;
  const EngineOptions& options_;
  std::span<std::byte> registered_;
  io_uring ring_{};
  bool fixed_ = false;
  int inflight_ = 0;
  std::vector<Request> requests_;
  std::vector<std::uint32_t> free_;
  std::vector<std::uint32_t> retry_;
  std::vector<Piece> whole_;  // pieces reaped whole, finished after the refill
  std::vector<std::pair<std::uint32_t, int>> reaped_;
  std::vector<io_uring_cqe*> cqes_;
  std::jthread thread_;
};

}  // namespace

std::unique_ptr<Worker> make_uring_worker(EngineCore& core, int ring_index,
                                          std::span<std::byte> registered, int& setup_errno) {
  auto worker = std::make_unique<UringWorker>(core, ring_index, registered);
  setup_errno = worker->start();
  if (setup_errno != 0) return nullptr;
  return worker;
}

}  // namespace strata::aio::detail
