#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "base/error.h"

namespace strata::models {

// The token file could not be written (the disk, not the text): its own type, so that a caller
// can give its own fix.
class TokenFileWriteError : public UserError {
 public:
  using UserError::UserError;
};

// Words 3 onwards of an llm.c header, which llm.c leaves 0 and strata's token cache uses.
inline constexpr std::size_t kLlmcFreeHeaderWords = 253;

// An llm.c token file written as its ids arrive, so that no more than a batch of them is held in
// memory: v1 (uint16) when `vocab` <= 65,536, else v7 (uint32); `header_extra` goes into header
// words 3 onwards. The file is OUT.partial.PID (a name of this process's own, so that ranks
// writing the same file at once each write their own) until finish() writes the count into the
// header and renames it OUT: a failed or abandoned write leaves no file a reader would take.
// `with_mask`: the loss mask (models/data/loss_mask.h) is written beside it as OUT.mask the same
// way, renamed before OUT, so that a whole OUT always has its whole mask.
class LlmcWriter {
 public:
  // Throws TokenFileWriteError naming the file when it cannot be created.
  LlmcWriter(std::filesystem::path out, std::int64_t vocab,
             std::span<const std::int32_t> header_extra = {}, bool with_mask = false);
  ~LlmcWriter();  // removes the partial file unless finish() ran
  LlmcWriter(const LlmcWriter&) = delete;
  LlmcWriter& operator=(const LlmcWriter&) = delete;

  // Throws TokenFileWriteError naming the file when it cannot be written, and UserError when
  // the ids would pass the 2^31 - 1 an llm.c header counts.
  // `mask`: one byte per id when the writer was made with_mask, else empty.
  void append(std::span<const std::uint32_t> ids, std::span<const std::uint8_t> mask = {});
  // Leaves the mask out after all (the ids turned out to need none): finish writes OUT alone.
  void drop_mask();
  void finish();
  std::size_t count() const { return count_; }

 private:
  [[noreturn]] void fail(const char* what) const;
  void finish_mask();

  std::filesystem::path out_;
  std::filesystem::path partial_;
  bool wide_;
  std::size_t count_ = 0;
  bool finished_ = false;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
  std::vector<std::int32_t> header_extra_;
  std::filesystem::path mask_partial_;  // empty without a mask
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> mask_file_;
};

}  // namespace strata::models
