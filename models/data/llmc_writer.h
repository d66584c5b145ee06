#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>

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
class LlmcWriter {
 public:
  // Throws TokenFileWriteError naming the file when it cannot be created.
  LlmcWriter(std::filesystem::path out, std::int64_t vocab,
             std::span<const std::int32_t> header_extra = {});
  ~LlmcWriter();  // removes the partial file unless finish() ran
  LlmcWriter(const LlmcWriter&) = delete;
  LlmcWriter& operator=(const LlmcWriter&) = delete;

  // Throws TokenFileWriteError naming the file when it cannot be written, and UserError when
  // the ids would pass the 2^31 - 1 an llm.c header counts.
  void append(std::span<const std::uint32_t> ids);
  void finish();
  std::size_t count() const { return count_; }

 private:
  [[noreturn]] void fail(const char* what) const;

  std::filesystem::path out_;
  std::filesystem::path partial_;
  bool wide_;
  std::size_t count_ = 0;
  bool finished_ = false;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
};

}  // namespace strata::models
