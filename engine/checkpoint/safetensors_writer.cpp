// SafetensorsWriter (engine/checkpoint/safetensors.h): the header first, then each tensor's bytes
// as they are appended, through plain buffered writes of the caller's pieces.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

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

}  // namespace

SafetensorsWriter::SafetensorsWriter(std::filesystem::path path, std::vector<Tensor> tensors,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)) {
  const std::string header = header_text(tensors, metadata, total_bytes_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw UserError(fmt::format("{}: cannot be created ({})", path_.string(), std::strerror(errno)),
                    "check that its directory exists and is writable", 1);
  std::array<std::byte, 8> length{};
  auto header_bytes = static_cast<std::uint64_t>(header.size());
  for (std::size_t i = 0; i < length.size(); ++i)
    length[i] = static_cast<std::byte>((header_bytes >> (8 * i)) & 0xff);
  try {
    write_all(length);
    write_all(std::as_bytes(std::span(header.data(), header.size())));
  } catch (...) {
    ::close(fd_);  // the destructor does not run for a constructor that throws
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
    throw;
  }
  written_bytes_ = 0;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);  // a partial file is never left to be read
  }
}

void SafetensorsWriter::append(std::span<const std::byte> bytes) {
  STRATA_ASSERT(!finished_);
  STRATA_ASSERT(static_cast<std::int64_t>(bytes.size()) <= bytes_left());
  write_all(bytes);
}

void SafetensorsWriter::finish() {
  STRATA_ASSERT(!finished_);
  STRATA_ASSERT(bytes_left() == 0);
  if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
    fd_ = -1;
    throw UserError(
        fmt::format("{}: cannot be made durable ({})", path_.string(), std::strerror(errno)),
        "check the disk: free space at its directory, or a failing device", 1);
  }
  fd_ = -1;
  finished_ = true;
}

// Short writes continue where they stopped, EINTR retries; ENOSPC and EIO are the user's to fix.
void SafetensorsWriter::write_all(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t done = ::write(fd_, bytes.data(), bytes.size());
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) {
      const int error = done < 0 ? errno : EIO;
      throw UserError(fmt::format("{}: writing failed ({})", path_.string(), std::strerror(error)),
                      error == ENOSPC ? "free space on its disk, or write it elsewhere"
                                      : "check the disk: a failing device or a full file system",
                      1);
    }
    bytes = bytes.subspan(static_cast<std::size_t>(done));
    written_bytes_ += done;
  }
}

}  // namespace strata::engine::checkpoint
