// StateStream (engine/checkpoint/state_stream.h): per file, a FileStream that reads the file front
// to back through a few aligned chunks and hands out the bytes asked for as they pass.
#include "engine/checkpoint/state_stream.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <vector>

#include "aio/aligned_buffer.h"
#include "aio/crc32c.h"
#include "base/assert.h"
#include "base/by_index.h"
#include "base/error.h"

namespace strata::engine::checkpoint {
namespace detail {

// One file of the checkpoint, read once from its first byte to its last: the CRC32C must see
// every byte, the caller only some. Positions asked for never go backwards.
class FileStream {
 public:
  FileStream(aio::Engine& io, const ShardReader& reader, std::size_t file)
      : io_(io),
        reader_(reader),
        file_(file),
        path_(reader.file_path(file)),
        size_bytes_(reader.manifest().files[file].bytes) {
    open_.emplace(io_.open(path_, aio::OpenMode::read));
    if (size_bytes_ % open_->alignment_bytes() != 0) {
      // The last bytes past the alignment are read with pread: an O_DIRECT read of the block
      // that holds the file's end comes back short.
      tail_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (tail_fd_ < 0)
        reader_.refuse_damaged(
            fmt::format("{}: cannot be opened ({})", path_.string(), std::strerror(errno)));
    }
    for (int c = 0; c < StateStream::kChunks; ++c) {
      chunks_.push_back({aio::AlignedBuffer(StateStream::kChunkBytes, open_->alignment_bytes())});
      free_.push_back(c);
    }
    refill();
  }

  ~FileStream() {
    for (int c : in_flight_) {
      try {
        io_.wait(chunks_[c].ticket);
      } catch (const std::exception&) {
        // The stream is abandoned: the error that abandoned it is the one that matters.
      }
    }
    if (tail_fd_ >= 0) ::close(tail_fd_);
  }

  FileStream(const FileStream&) = delete;
  FileStream& operator=(const FileStream&) = delete;

  // Copies the file's bytes [position, position + out.size()) into `out`.
  void copy(std::int64_t position, std::span<std::byte> out) {
    while (!out.empty()) {
      while (current_ < 0 || position >= end_of(current_))
        advance();
      const Chunk& chunk = chunks_[current_];
      STRATA_ASSERT(position >= chunk.file_offset);  // requests come in flat order
      const auto take = static_cast<std::size_t>(std::min<std::int64_t>(
          static_cast<std::int64_t>(out.size()), end_of(current_) - position));
      std::memcpy(out.data(), chunk.buffer.data() + (position - chunk.file_offset), take);
      out = out.subspan(take);
      position += static_cast<std::int64_t>(take);
    }
  }

  // Reads to the end and checks the CRC32C.
  void finish() {
    while (!in_flight_.empty())
      advance();
    reader_.check_crc(file_, crc_.value(), bytes_read_);
  }

  std::int64_t bytes_read() const noexcept { return bytes_read_; }

 private:
  struct Chunk {
    aio::AlignedBuffer buffer;
    aio::Ticket ticket = {};
    std::int64_t file_offset = 0;
    std::int64_t length = 0;
  };

  std::int64_t end_of(int chunk) const {
    const Chunk& c = chunks_[chunk];
    return c.file_offset + c.length;
  }

  // Submits reads into every free chunk while the file has bytes left.
  void refill() {
    while (!free_.empty() && next_offset_ < size_bytes_) {
      const int c = free_.back();
      free_.pop_back();
      Chunk& chunk = chunks_[c];
      chunk.file_offset = next_offset_;
      chunk.length = std::min(StateStream::kChunkBytes, size_bytes_ - next_offset_);
      const std::int64_t alignment = open_->alignment_bytes();
      const std::int64_t aligned = chunk.length / alignment * alignment;
      if (aligned > 0) {
        chunk.ticket =
            io_.submit_read(*open_, chunk.file_offset,
                            chunk.buffer.span().first(static_cast<std::size_t>(aligned)));
      }
      if (aligned < chunk.length) read_tail(chunk, aligned);
      next_offset_ += chunk.length;
      in_flight_.push_back(c);
    }
  }

  void read_tail(Chunk& chunk, std::int64_t from) {
    while (from < chunk.length) {
      const ssize_t n =
          ::pread(tail_fd_, chunk.buffer.data() + from,
                  static_cast<std::size_t>(chunk.length - from), chunk.file_offset + from);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        reader_.refuse_damaged(fmt::format("{}: reading its last {} bytes failed ({})",
                                           path_.string(), chunk.length - from,
                                           n == 0 ? "the file ends early" : std::strerror(errno)));
      }
      from += n;
    }
  }

  // Makes the oldest chunk in flight the current one, once its bytes are in and counted.
  void advance() {
    if (in_flight_.empty()) {
      reader_.refuse_damaged(
          fmt::format("{}: a piece the manifest places in it lies past its "
                      "end",
                      path_.string()));
    }
    if (current_ >= 0) free_.push_back(current_);
    current_ = in_flight_.front();
    in_flight_.pop_front();
    Chunk& chunk = chunks_[current_];
    if (chunk.ticket.valid()) io_.wait(std::exchange(chunk.ticket, aio::Ticket()));
    crc_.update(chunk.buffer.span().first(static_cast<std::size_t>(chunk.length)));
    bytes_read_ += chunk.length;
    refill();
  }

  aio::Engine& io_;
  const ShardReader& reader_;
  std::size_t file_;
  std::filesystem::path path_;
  std::int64_t size_bytes_ = 0;
  std::optional<aio::File> open_;  // optional: aio::File() is not usable outside aio
  int tail_fd_ = -1;
  base::ByIndex<Chunk> chunks_;
  std::vector<int> free_;
  std::deque<int> in_flight_;  // oldest first
  int current_ = -1;           // the chunk being copied from
  std::int64_t next_offset_ = 0;
  aio::Crc32c crc_;
  std::int64_t bytes_read_ = 0;
};

}  // namespace detail

StateStream::StateStream(aio::Engine& io, const ShardReader& reader, std::string state)
    : io_(io), reader_(reader), state_(std::move(state)) {
  STRATA_ASSERT(!io.options().verify_checksums);
}

StateStream::~StateStream() = default;

detail::FileStream& StateStream::file(std::size_t index) {
  auto found = files_.find(index);
  if (found == files_.end())
    found = files_.emplace(index, std::make_unique<detail::FileStream>(io_, reader_, index)).first;
  return *found->second;
}

void StateStream::read(const std::string& tensor, std::int64_t param_offset, std::span<float> out) {
  const std::int64_t end = param_offset + static_cast<std::int64_t>(out.size());
  std::int64_t covered = 0;
  if (const std::vector<ShardReader::Source>* list = reader_.sources(state_, tensor)) {
    for (const ShardReader::Source& source : *list) {
      const std::int64_t begin = std::max(param_offset, source.param_offset);
      const std::int64_t stop = std::min(end, source.param_offset + source.numel);
      if (begin >= stop) continue;
      const std::int64_t position = reader_.file(source.file).data_offset() + source.entry->begin +
                                    (begin - source.param_offset) * std::int64_t{sizeof(float)};
      file(source.file)
          .copy(position,
                std::as_writable_bytes(out.subspan(static_cast<std::size_t>(begin - param_offset),
                                                   static_cast<std::size_t>(stop - begin))));
      covered += stop - begin;
    }
  }
  if (covered != static_cast<std::int64_t>(out.size())) {
    reader_.refuse_damaged(
        fmt::format("{}: no file holds {} of elements [{}, {}) of tensor "
                    "\"{}\" (the files are incomplete or overlap)",
                    reader_.path().string(), state_, param_offset, end, tensor));
  }
}

void StateStream::finish() {
  for (auto& [index, stream] : files_)
    stream->finish();
}

std::int64_t StateStream::bytes_read() const noexcept {
  std::int64_t bytes = 0;
  for (const auto& [index, stream] : files_)
    bytes += stream->bytes_read();
  return bytes;
}

std::int64_t verify_files(aio::Engine& io, const ShardReader& reader) {
  STRATA_ASSERT(!io.options().verify_checksums);
  std::int64_t bytes = 0;
  for (std::size_t f = 0; f < reader.manifest().files.size(); ++f) {
    detail::FileStream stream(io, reader, f);
    stream.finish();
    bytes += stream.bytes_read();
  }
  return bytes;
}

}  // namespace strata::engine::checkpoint
