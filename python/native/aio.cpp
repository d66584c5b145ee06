// DeepNVMe's aio handle on strata's aio engine (io_uring, docs/aio.md), for strata/aio.py.
//
// AioHandle::submit starts one transfer between `bytes` of memory at `address` and a file at
// `offset` (both multiples of 4 KiB: strata/aio.py refuses others first, as the engine would) and
// returns; wait() finishes every transfer submitted, in order, and returns how many. Memory that
// is not 4 KiB aligned (an ordinary torch tensor) goes through an aligned bounce buffer: copied
// in before a write, out after a read. The caller keeps the memory alive and untouched until
// wait() returns. The GIL is released while the handle submits and waits.
#include "python/native/aio.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "aio/aligned_buffer.h"
#include "aio/engine.h"
#include "aio/errors.h"
#include "python/native/errors.h"

namespace strata::python {
namespace {

namespace py = pybind11;

constexpr std::int64_t kAlignment = aio::AlignedBuffer::default_alignment_bytes;

struct HandleOptions {
  std::int64_t block_size;
  int queue_depth;
  bool single_submit;
  bool overlap_events;
  int intra_op_parallelism;
  bool verify;
};

class AioHandle {
 public:
  explicit AioHandle(const HandleOptions& options)
      : options_(options), engine_(engine_options(options)) {}
  ~AioHandle() {
    // Transfers still in flight write into memory the caller may free: they finish first.
    try {
      wait();
    } catch (const std::exception&) {  // nobody is left to hear it
    }
  }
  AioHandle(const AioHandle&) = delete;
  AioHandle& operator=(const AioHandle&) = delete;

  void submit(bool read, std::uintptr_t address, std::int64_t bytes, const std::string& path,
              std::int64_t offset) {
    const std::lock_guard<std::mutex> lock(mutex_);
    Pending pending{read, reinterpret_cast<std::byte*>(address), bytes, {}, {}, {}};
    pending.file = file_for(path, read);
    std::byte* memory = pending.memory;
    if (address % kAlignment != 0) {
      pending.bounce.emplace(bytes);
      if (!read) std::memcpy(pending.bounce->data(), memory, static_cast<std::size_t>(bytes));
      memory = pending.bounce->data();
    }
    const std::span<std::byte> span(memory, static_cast<std::size_t>(bytes));
    pending.ticket = read ? engine_.submit_read(*pending.file, offset, span)
                          : engine_.submit_write(*pending.file, offset, span);
    pending_.push_back(std::move(pending));
  }

  // Every transfer submitted, in order; the first failure is thrown once all are done.
  int wait() {
    std::vector<Pending> done;
    std::map<std::string, OpenFile> files;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      done.swap(pending_);
      files.swap(files_);
    }
    std::exception_ptr failure;
    for (Pending& pending : done) {
      try {
        engine_.wait(pending.ticket);
        if (pending.read && pending.bounce) {
          std::memcpy(pending.memory, pending.bounce->data(),
                      static_cast<std::size_t>(pending.bytes));
        }
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    // Each file written: its checksums' sidecar, once, for all the writes to it.
    for (auto& [path, open] : files) {
      try {
        if (open.writable && options_.verify) open.file->sync();
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
    return static_cast<int>(done.size());
  }

 private:
  struct Pending {
    bool read;
    std::byte* memory;
    std::int64_t bytes;
    std::optional<aio::AlignedBuffer> bounce;
    std::shared_ptr<aio::File> file;
    aio::Ticket ticket;
  };
  // A file the transfers in flight share: one descriptor and one checksum table per path, so
  // that two writes to a file before a wait() keep both their sectors' CRC32Cs.
  struct OpenFile {
    std::shared_ptr<aio::File> file;
    bool writable;
  };

  std::shared_ptr<aio::File> file_for(const std::string& path, bool read) {
    const auto found = files_.find(path);
    if (found != files_.end() && (read || found->second.writable)) return found->second.file;
    auto file = std::make_shared<aio::File>(
        engine_.open(path, read ? aio::OpenMode::read : aio::OpenMode::create));
    files_[path] = OpenFile{file, !read};
    return file;
  }

  static aio::EngineOptions engine_options(const HandleOptions& options) {
    aio::EngineOptions engine;
    engine.block_size_bytes = options.block_size;
    engine.queue_depth = options.queue_depth;
    engine.thread_count = options.intra_op_parallelism;
    engine.single_submit = options.single_submit;
    engine.overlap_events = options.overlap_events;
    engine.verify_checksums = options.verify;
    return engine;
  }

  HandleOptions options_;
  aio::Engine engine_;
  std::mutex mutex_;  // pending_ and files_: two Python threads may submit on one handle
  std::vector<Pending> pending_;
  std::map<std::string, OpenFile> files_;  // the files of pending_, by path
};

// Page-locked memory for new_cpu_locked_tensor: 4 KiB aligned, zeroed, locked with mlock so that
// it is never swapped out (what pin_memory() gives where torch has CUDA). Exposed as a writable
// buffer that torch.frombuffer wraps; unlocked and freed when the last tensor over it goes.
class LockedBuffer {
 public:
  explicit LockedBuffer(std::int64_t bytes)
      : buffer_(std::max<std::int64_t>(bytes, 1)), bytes_(bytes) {
    if (mlock(buffer_.data(), static_cast<std::size_t>(buffer_.size_bytes())) != 0) {
      const int error = errno;
      throw SystemError{error, "could not lock " + std::to_string(bytes) +
                                   " bytes of memory (mlock: " + std::strerror(error) +
                                   "); fix: raise the locked-memory limit (ulimit -l, or "
                                   "LimitMEMLOCK for a service), or allocate fewer bytes"};
    }
    locked_ = true;
  }
  ~LockedBuffer() { unlock(); }
  LockedBuffer(const LockedBuffer&) = delete;
  LockedBuffer& operator=(const LockedBuffer&) = delete;

  void unlock() {
    if (locked_) munlock(buffer_.data(), static_cast<std::size_t>(buffer_.size_bytes()));
    locked_ = false;
  }
  py::buffer_info info() {
    return py::buffer_info(buffer_.data(), 1, py::format_descriptor<std::uint8_t>::format(), 1,
                           {bytes_}, {1}, /*readonly=*/false);
  }

 private:
  aio::AlignedBuffer buffer_;
  std::int64_t bytes_;
  bool locked_ = false;
};

}  // namespace

void add_aio(py::module_& module) {
  py::class_<AioHandle>(module, "AioHandle")
      .def(py::init([](std::int64_t block_size, int queue_depth, bool single_submit,
                       bool overlap_events, int intra_op_parallelism, bool verify) {
             return std::make_unique<AioHandle>(HandleOptions{block_size, queue_depth,
                                                              single_submit, overlap_events,
                                                              intra_op_parallelism, verify});
           }),
           py::kw_only(), py::arg("block_size"), py::arg("queue_depth"), py::arg("single_submit"),
           py::arg("overlap_events"), py::arg("intra_op_parallelism"), py::arg("verify"))
      .def("submit", &AioHandle::submit, py::kw_only(), py::arg("read"), py::arg("address"),
           py::arg("bytes"), py::arg("path"), py::arg("offset"),
           py::call_guard<py::gil_scoped_release>())
      .def("wait", &AioHandle::wait, py::call_guard<py::gil_scoped_release>());
  py::class_<LockedBuffer>(module, "LockedBuffer", py::buffer_protocol())
      .def(py::init<std::int64_t>(), py::arg("bytes"))
      .def_buffer(&LockedBuffer::info)
      .def("unlock", &LockedBuffer::unlock);
}

}  // namespace strata::python
