#pragma once

// The safetensors format (Hugging Face's, readable by the `safetensors` library): an 8-byte
// little-endian header length N, N bytes of JSON, then the tensors' bytes back to back:
//
//   {"__metadata__": {"format": "pt"},
//    "h.0.attn.weight": {"dtype": "BF16", "shape": [768, 2304], "data_offsets": [0, 3538944]}, ...}
//
// data_offsets are byte offsets into the data section; the tensors cover it exactly, with no hole
// and no overlap; data is little-endian and row-major. Checkpoints store tensors in it, and models
// load Hugging Face weights from it, through this one reader and writer.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "aio/aligned_buffer.h"
#include "aio/crc32c.h"
#include "aio/engine.h"
#include "base/mapped_file.h"

namespace strata::engine::checkpoint {

// The element types safetensors names ("F32", "BF16", ...).
enum class Dtype { boolean, u8, i8, i16, u16, f16, bf16, i32, u32, f32, f64, i64, u64 };

const char* to_string(Dtype dtype);
std::int64_t element_bytes(Dtype dtype);

// One tensor of a file: name, type, shape and where its bytes are in the data section.
struct TensorEntry {
  std::string name;
  Dtype dtype = Dtype::f32;
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0;  // bytes from the start of the data section
  std::int64_t end = 0;

  std::int64_t numel() const;
  std::int64_t bytes() const { return end - begin; }
};

// A safetensors file opened for reading: the header parsed and checked against the file, the
// file mapped read-only, so a tensor's bytes are paged in when read and the whole file is never
// copied into memory. Move-only; spans from data() live as long as the file object.
class SafetensorsFile {
 public:
  // Throws UserError naming the file (and the tensor) when it is missing or unreadable, shorter
  // than its header says, has a header that is not a JSON object of tensors, names an unknown
  // dtype, gives a shape its byte range does not hold, or leaves a hole or an overlap between
  // tensors.
  static SafetensorsFile open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept = default;

  const std::filesystem::path& path() const noexcept { return path_; }
  // Every tensor, in the order of their bytes in the file.
  const std::vector<TensorEntry>& tensors() const noexcept { return tensors_; }
  // nullptr when the file has no tensor of that name.
  const TensorEntry* find(std::string_view name) const;
  std::span<const std::byte> data(const TensorEntry& tensor) const;
  // Where the data section starts in the file: a tensor's bytes are at data_offset() + begin.
  std::int64_t data_offset() const noexcept { return data_offset_; }
  // The header's "__metadata__" (string to string), empty when absent.
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

 private:
  SafetensorsFile() = default;

  std::filesystem::path path_;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
  base::MappedFile mapping_;
  std::int64_t data_offset_ = 0;  // where the data section starts in the file
};

// What a finished file holds: its size and the CRC32C of all its bytes (aio/crc32c.h), for a
// checkpoint's manifest.
struct WrittenFile {
  std::int64_t bytes = 0;
  std::uint32_t crc32c = 0;
};

// Writes a safetensors file in one pass, so that memory holds one piece of a tensor at a time: the
// header from the declared tensors, then their bytes in declaration order through append(), in
// pieces of any size. The bytes gather in kStagingBuffers staging buffers of kStagingBytes, 4 KiB
// aligned, that go to the disk through `io` (io_uring, O_DIRECT where the file system allows it)
// while the next fills, so that up to kStagingBuffers - 1 of them are in flight (queue depth for
// the disk): a checkpoint's states leave at the disk's speed without a copy in the page cache.
// finish() checks that every declared byte came, cuts the file to its size and makes it durable
// (fdatasync, fsync). The file is created mode 0644 less the umask, readable as a model file is.
// A writer destroyed before finish() removes its partial file. Errors of the disk (ENOSPC, EIO)
// are UserErrors naming the file and the fix.
//
// `io` must outlive the writer and verify no checksums of its own (the manifest's CRC32C of the
// whole file stands for them; a sidecar would be a second file per file).
class SafetensorsWriter {
 public:
  static constexpr std::int64_t kStagingBytes = std::int64_t{8} << 20;
  static constexpr int kStagingBuffers = 4;

  struct Tensor {
    std::string name;
    Dtype dtype = Dtype::f32;
    std::vector<std::int64_t> shape;
  };

  SafetensorsWriter(aio::Engine& io, std::filesystem::path path, std::vector<Tensor> tensors,
                    std::map<std::string, std::string> metadata = {});
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  ~SafetensorsWriter();

  // The next bytes of the tensors, in declaration order; at most what is still declared.
  void append(std::span<const std::byte> bytes);
  // Every declared byte must have been appended (a programmer error otherwise).
  WrittenFile finish();

  std::int64_t bytes_left() const noexcept { return total_bytes_ - written_bytes_; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  void stage(std::span<const std::byte> bytes);
  void flush(std::int64_t length);
  void wait_staged();
  [[noreturn]] void rethrow_disk_error(const std::exception& error) const;

  aio::Engine& io_;
  std::filesystem::path path_;
  std::optional<aio::File> file_;  // optional: aio::File() is not usable outside aio
  aio::AlignedBuffer staging_[kStagingBuffers];
  aio::Ticket in_flight_[kStagingBuffers];
  int current_ = 0;              // the staging buffer being filled
  std::int64_t filled_ = 0;      // bytes in it
  std::int64_t file_bytes_ = 0;  // bytes handed to the disk so far (whole staging buffers)
  aio::Crc32c crc_;
  std::int64_t total_bytes_ = 0;    // the tensors' bytes, header not counted
  std::int64_t written_bytes_ = 0;  // of those, appended so far
  std::int64_t header_bytes_ = 0;   // 8 + the header text
  bool finished_ = false;
};

}  // namespace strata::engine::checkpoint
