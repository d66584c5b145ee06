#include "models/data/llmc_writer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <system_error>
#include <vector>

#include "base/assert.h"
#include "base/error.h"
#include "models/data/loss_mask.h"

namespace strata::models {
namespace {

constexpr std::int32_t kLlmcMagicU16 = 20240520;
constexpr std::int32_t kLlmcMagicU32 = 20240801;
constexpr std::size_t kLlmcHeaderWords = 256;

}  // namespace

LlmcWriter::LlmcWriter(std::filesystem::path out, std::int64_t vocab,
                       std::span<const std::int32_t> header_extra, bool with_mask)
    : out_(std::move(out)),
      wide_(vocab > 65536),
      file_(nullptr, &std::fclose),
      header_extra_(header_extra.begin(), header_extra.end()),
      mask_file_(nullptr, &std::fclose) {
  STRATA_ASSERT(header_extra.size() <= kLlmcFreeHeaderWords);
  partial_ = out_;
  partial_ += fmt::format(".partial.{}", getpid());
  file_.reset(std::fopen(partial_.c_str(), "wb"));
  if (!file_) fail("cannot create");
  // The count stays 0 until finish(): a header that lies about nothing.
  std::array<std::int32_t, kLlmcHeaderWords> header{};
  header[0] = wide_ ? kLlmcMagicU32 : kLlmcMagicU16;
  header[1] = wide_ ? 7 : 1;
  std::copy(header_extra.begin(), header_extra.end(), header.begin() + 3);
  if (std::fwrite(header.data(), sizeof(std::int32_t), header.size(), file_.get()) !=
      header.size()) {
    fail("cannot write");
  }
  if (!with_mask) return;
  mask_partial_ = mask_path(out_);
  mask_partial_ += fmt::format(".partial.{}", getpid());
  mask_file_.reset(std::fopen(mask_partial_.c_str(), "wb"));
  if (!mask_file_) fail("cannot create");
  const auto mask_head = mask_header(0, header_extra_);
  if (std::fwrite(mask_head.data(), 1, mask_head.size(), mask_file_.get()) != mask_head.size())
    fail("cannot write");
}

LlmcWriter::~LlmcWriter() {
  if (finished_) return;
  file_.reset();
  mask_file_.reset();
  std::error_code ignored;
  std::filesystem::remove(partial_, ignored);
  if (!mask_partial_.empty()) std::filesystem::remove(mask_partial_, ignored);
}

void LlmcWriter::append(std::span<const std::uint32_t> ids, std::span<const std::uint8_t> mask) {
  STRATA_ASSERT(!finished_);
  STRATA_ASSERT(mask.size() == (mask_file_ ? ids.size() : 0));
  if (count_ + ids.size() > static_cast<std::size_t>(INT32_MAX)) {
    throw UserError(fmt::format("{} would hold more than the 2^31 - 1 tokens an llm.c header "
                                "counts",
                                out_.string()),
                    "split the input into several files and tokenize each on its own", 2);
  }
  bool written = false;
  if (wide_) {
    written = std::fwrite(ids.data(), sizeof(std::uint32_t), ids.size(), file_.get()) == ids.size();
  } else {
    const std::vector<std::uint16_t> narrow(ids.begin(), ids.end());
    written =
        std::fwrite(narrow.data(), sizeof(std::uint16_t), narrow.size(), file_.get()) == ids.size();
  }
  if (written && mask_file_)
    written = std::fwrite(mask.data(), 1, mask.size(), mask_file_.get()) == mask.size();
  if (!written) fail("cannot write");
  count_ += ids.size();
}

void LlmcWriter::finish() {
  STRATA_ASSERT(!finished_);
  const auto count = static_cast<std::int32_t>(count_);
  if (std::fseek(file_.get(), 2 * sizeof(std::int32_t), SEEK_SET) != 0 ||
      std::fwrite(&count, sizeof(count), 1, file_.get()) != 1 || std::fflush(file_.get()) != 0) {
    fail("cannot write");
  }
  if (std::fclose(file_.release()) != 0) fail("cannot write");
  std::error_code error;
  if (mask_file_) {
    finish_mask();
  } else if (std::filesystem::remove(mask_path(out_), error); error) {
    // A mask left from an earlier write of OUT would be read as this one's.
    errno = error.value();
    fail("cannot remove the old mask beside it");
  }
  std::filesystem::rename(partial_, out_, error);
  if (error) {
    errno = error.value();
    fail("cannot rename to its name");
  }
  finished_ = true;
}

void LlmcWriter::drop_mask() {
  if (!mask_file_) return;
  mask_file_.reset();
  std::error_code ignored;
  std::filesystem::remove(mask_partial_, ignored);
  mask_partial_.clear();
}

// The mask's count into its header, then its name: before the ids', so that a reader finding OUT
// finds OUT.mask whole beside it.
void LlmcWriter::finish_mask() {
  const auto header = mask_header(count_, header_extra_);
  if (std::fseek(mask_file_.get(), 0, SEEK_SET) != 0 ||
      std::fwrite(header.data(), 1, header.size(), mask_file_.get()) != header.size() ||
      std::fclose(mask_file_.release()) != 0) {
    fail("cannot write");
  }
  std::error_code error;
  std::filesystem::rename(mask_partial_, mask_path(out_), error);
  if (error) {
    errno = error.value();
    fail("cannot rename to its name");
  }
}

void LlmcWriter::fail(const char* what) const {
  throw TokenFileWriteError(
      fmt::format("{} {}: {}", what, partial_.string(),
                  std::error_code(errno, std::system_category()).message()),
      fmt::format("write the token file {} to a folder you can write to, with free "
                  "space",
                  out_.string()),
      1);
}

}  // namespace strata::models
