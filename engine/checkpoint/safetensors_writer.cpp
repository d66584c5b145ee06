// SafetensorsWriter (engine/checkpoint/safetensors.h): the header first, then each tensor's bytes
// as they are appended, staged in aligned buffers that go to the disk through aio.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <utility>

#include "aio/errors.h"
#include "aio/file.h"
#include "base/assert.h"
#include "base/error.h"
#include "engine/checkpoint/safetensors.h"

namespace strata::engine::checkpoint {
namespace {

using nlohmann::json;

// The header as the safetensors library writes it: "__metadata__" when there is any, each tensor
// with its dtype, shape and data_offsets, padded with spaces to a multiple of 8 bytes so that
// the data section starts aligned.
std::string header_text(const std::vector<SafetensorsWriter::Tensor>& tensors,
                        const std::map<std::string, std::string>& metadata,
                        std::int64_t& total_bytes) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::int64_t at = 0;
  for (const SafetensorsWriter::Tensor& tensor : tensors) {
    STRATA_ASSERT(names.insert(tensor.name).second);
    STRATA_ASSERT(tensor.name != "__metadata__");
    std::int64_t bytes = element_bytes(tensor.dtype);
    for (std::int64_t extent : tensor.shape) {
      STRATA_ASSERT(extent >= 0);
      bytes *= extent;
    }
    header[tensor.name] = {{"dtype", to_string(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  total_bytes = at;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// The length prefix and the header, as the file's first bytes.
std::vector<std::byte> file_start(const std::string& header) {
  std::vector<std::byte> bytes(8 + header.size());
  auto length = static_cast<std::uint64_t>(header.size());
  for (std::size_t i = 0; i < 8; ++i)
    bytes[i] = static_cast<std::byte>((length >> (8 * i)) & 0xff);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  return bytes;
}

// Creates the empty file as any program's output: mode 0644 less the umask, as transformers'
// save_pretrained leaves model files for other users and tools to read. aio creates files 0600,
// which suits swap files, not a model; a file it opens that exists keeps its mode.
void create_readable(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category());
  ::close(fd);
}

std::filesystem::path parent_or_dot(const std::filesystem::path& path) {
  return path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(aio::Engine& io, std::filesystem::path path,
                                     std::vector<Tensor> tensors,
                                     std::map<std::string, std::string> metadata)
    : io_(io), path_(std::move(path)) {
  STRATA_ASSERT(!io.options().verify_checksums);
  const std::vector<std::byte> start = file_start(header_text(tensors, metadata, total_bytes_));
  header_bytes_ = static_cast<std::int64_t>(start.size());
  aio::remove_file(path_);  // a leftover of an earlier attempt is never appended to
  try {
    create_readable(path_);
    file_ = io_.open(path_, aio::OpenMode::create);
    // The whole file at once, as fio lays out its files: no write then extends it (one fallocate
    // each), and a disk too full for the file says so before anything is written.
    const std::int64_t alignment = file_->alignment_bytes();
    file_->allocate((header_bytes_ + total_bytes_ + alignment - 1) / alignment * alignment);
  } catch (const std::exception& error) {
    rethrow_disk_error(error);
  }
  for (aio::AlignedBuffer& buffer : staging_)
    buffer = aio::AlignedBuffer(kStagingBytes, file_->alignment_bytes());
  stage(start);
}

SafetensorsWriter::~SafetensorsWriter() {
  if (finished_) return;
  for (aio::Ticket& ticket : in_flight_) {
    if (!ticket.valid()) continue;
    try {
      io_.wait(ticket);
    } catch (const std::exception&) {
      // The file is removed below: its errors no longer matter.
    }
  }
  file_.reset();
  aio::remove_file(path_);  // a partial file is never left to be read
}

void SafetensorsWriter::append(std::span<const std::byte> bytes) {
  STRATA_ASSERT(!finished_);
  STRATA_ASSERT(static_cast<std::int64_t>(bytes.size()) <= bytes_left());
  stage(bytes);
  written_bytes_ += static_cast<std::int64_t>(bytes.size());
}

WrittenFile SafetensorsWriter::finish() {
  STRATA_ASSERT(!finished_);
  STRATA_ASSERT(bytes_left() == 0);
  const std::int64_t size = header_bytes_ + total_bytes_;
  const std::int64_t alignment = file_->alignment_bytes();
  try {
    if (filled_ > 0) flush((filled_ + alignment - 1) / alignment * alignment);
    wait_staged();
    file_->sync();
    file_.reset();
    // The last block went out whole; the file ends where its tensors do.
    if (::truncate(path_.c_str(), size) != 0)
      throw std::system_error(errno, std::generic_category());
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    const bool durable = fd >= 0 && ::fsync(fd) == 0;
    if (fd >= 0) ::close(fd);
    if (!durable) throw std::system_error(errno, std::generic_category());
  } catch (const std::exception& error) {
    rethrow_disk_error(error);
  }
  finished_ = true;
  return {size, crc_.value()};
}

// Copies into the staging buffer, sending each one that fills to the disk.
void SafetensorsWriter::stage(std::span<const std::byte> bytes) {
  // The CRC32C reads each piece right after the copy wrote it, while it is still in the cache,
  // instead of reading the source from memory a second time.
  constexpr std::size_t kPiece = std::size_t{256} << 10;
  while (!bytes.empty()) {
    const auto room = static_cast<std::size_t>(kStagingBytes - filled_);
    const std::size_t take = std::min({room, bytes.size(), kPiece});
    std::byte* target = staging_[current_].data() + filled_;
    std::memcpy(target, bytes.data(), take);
    crc_.update({target, take});
    filled_ += static_cast<std::int64_t>(take);
    bytes = bytes.subspan(take);
    if (filled_ == kStagingBytes) flush(kStagingBytes);
  }
}

// Writes the current staging buffer's first `length` bytes (a multiple of the file's alignment;
// zeros past `filled_`) and turns to the next buffer once its own earlier write is done.
void SafetensorsWriter::flush(std::int64_t length) {
  std::byte* data = staging_[current_].data();
  std::memset(data + filled_, 0, static_cast<std::size_t>(length - filled_));
  try {
    in_flight_[current_] =
        io_.submit_write(*file_, file_bytes_, {data, static_cast<std::size_t>(length)});
    file_bytes_ += length;
    current_ = (current_ + 1) % kStagingBuffers;
    filled_ = 0;
    if (in_flight_[current_].valid()) {
      aio::Ticket previous = std::exchange(in_flight_[current_], aio::Ticket());
      io_.wait(previous);
    }
  } catch (const std::exception& error) {
    rethrow_disk_error(error);
  }
}

void SafetensorsWriter::wait_staged() {
  for (aio::Ticket& ticket : in_flight_) {
    if (ticket.valid()) io_.wait(std::exchange(ticket, aio::Ticket()));
  }
}

// The disk's errors with a fix about this file's directory, not the swap path aio's own fixes
// speak of.
void SafetensorsWriter::rethrow_disk_error(const std::exception& error) const {
  const auto* io_error = dynamic_cast<const aio::IoError*>(&error);
  const auto* system_error = dynamic_cast<const std::system_error*>(&error);
  const int code = io_error       ? io_error->errno_value()
                   : system_error ? system_error->code().value()
                                  : 0;
  const std::string directory = parent_or_dot(path_).string();
  std::string fix;
  if (code == ENOSPC || code == EDQUOT) {
    fix = fmt::format("free space at {}, or write to a disk with room", directory);
  } else if (code == EACCES || code == EPERM || code == EROFS) {
    fix = fmt::format("make {} writable by this user, or write elsewhere", directory);
  } else if (code == ENOENT) {
    fix = fmt::format("create {} first, or fix the path", directory);
  } else {
    fix = "check the disk (dmesg, the drive's SMART log), or write to another one";
  }
  throw UserError(fmt::format("{}: writing failed: {}", path_.string(), error.what()), fix, 1);
}

}  // namespace strata::engine::checkpoint
