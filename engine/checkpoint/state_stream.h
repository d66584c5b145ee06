#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "aio/engine.h"
#include "engine/checkpoint/shard_reader.h"

namespace strata::engine::checkpoint {

namespace detail {
class FileStream;
}

// Reads one state of a checkpoint (master, exp_avg or exp_avg_sq) for a partition of any layout,
// each file it needs once, front to back, verifying it on the way. Pieces are asked for in flat
// order (module by module, each tensor's offsets ascending), which is the order of every
// partition's pieces at any world size and stage, and so also the order of the pieces inside each
// saved file. Each file is read through aio (O_DIRECT where the file system allows it) into
// kChunks staging buffers of kChunkBytes, read ahead while the caller copies out of the current
// one; every byte of a file passes through its CRC32C, checked against the manifest when the
// stream finishes. A file is opened when a piece in it is first asked for, and read to its end
// at finish(); files holding nothing asked for are not read.
//
// Memory: kChunks x kChunkBytes per file read, whatever the checkpoint's size (three files of a
// rank's own states when the world size is unchanged). `io` and `reader` must outlive the
// stream; `io` verifies no checksums of its own (the manifest's CRC32C stands for them).
//
// The data reaches the caller before its file's CRC32C is known: a load that finds a damaged
// file at finish() has already copied some of it, so the Engine marks itself unusable then
// (engine/engine.h, load_checkpoint).
class StateStream {
 public:
  static constexpr std::int64_t kChunkBytes = std::int64_t{8} << 20;
  static constexpr int kChunks = 4;

  StateStream(aio::Engine& io, const ShardReader& reader, std::string state);
  ~StateStream();
  StateStream(const StateStream&) = delete;
  StateStream& operator=(const StateStream&) = delete;

  // Elements [param_offset, param_offset + out.size()) of `tensor`. Throws UserError naming the
  // checkpoint and the tensor for elements no file holds, aio::IoError (with its fix) for a
  // failed read, and UserError naming the file for one that ends before the manifest says.
  void read(const std::string& tensor, std::int64_t param_offset, std::span<float> out);
  // Reads every file begun to its end and checks its CRC32C; throws UserError naming the first
  // file whose bytes differ from the manifest's.
  void finish();

  // Bytes read from the files so far.
  std::int64_t bytes_read() const noexcept;

 private:
  detail::FileStream& file(std::size_t index);

  aio::Engine& io_;
  const ShardReader& reader_;
  std::string state_;
  std::map<std::size_t, std::unique_ptr<detail::FileStream>> files_;  // by manifest file
};

// Reads every file of the checkpoint front to back through `io` and checks its CRC32C (`strata
// ckpt inspect --verify`); throws UserError naming the first file that differs. Returns the
// bytes checked. `io` verifies no checksums of its own.
std::int64_t verify_files(aio::Engine& io, const ShardReader& reader);

}  // namespace strata::engine::checkpoint
