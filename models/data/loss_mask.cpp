#include "models/data/loss_mask.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <system_error>

#include "base/error.h"

namespace strata::models {
namespace {

constexpr char kMaskMagic[8] = {'s', 't', 'r', 'm', 'a', 's', 'k', '1'};

}  // namespace

std::filesystem::path mask_path(const std::filesystem::path& token_file) {
  std::filesystem::path mask = token_file;
  mask += ".mask";
  return mask;
}

MaskFile open_mask(const std::filesystem::path& token_file, std::size_t token_count) {
  const std::filesystem::path path = mask_path(token_file);
  MaskFile mask;
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return mask;
  const std::string fix = fmt::format(
      "write {} and its mask again with `strata tokenize --output`, or remove {} to train on "
      "every token",
      token_file.string(), path.string());
  try {
    mask.mapping = base::MappedFile::open(path);
  } catch (const std::system_error& failure) {
    throw UserError(fmt::format("the loss mask {}: {}", path.string(), failure.what()), fix, 2);
  }
  const std::span<const std::byte> bytes = mask.mapping.bytes();
  std::uint64_t count = 0;
  if (bytes.size() >= kMaskHeaderBytes) std::memcpy(&count, bytes.data() + 8, sizeof(count));
  if (bytes.size() < kMaskHeaderBytes || std::memcmp(bytes.data(), kMaskMagic, 8) != 0 ||
      count != bytes.size() - kMaskHeaderBytes || count != token_count) {
    throw UserError(fmt::format("{} is not the loss mask of {}: a header \"strmask1\" and one "
                                "byte for each of its {} tokens were expected, found {} bytes",
                                path.string(), token_file.string(), token_count, bytes.size()),
                    fix, 2);
  }
  mask.bytes = {reinterpret_cast<const std::uint8_t*>(bytes.data()) + kMaskHeaderBytes, count};
  mask.key = {reinterpret_cast<const std::int32_t*>(bytes.data() + 16), kMaskKeyWords};
  return mask;
}

std::array<std::byte, kMaskHeaderBytes> mask_header(std::uint64_t count,
                                                    std::span<const std::int32_t> key) {
  std::array<std::byte, kMaskHeaderBytes> header{};
  std::memcpy(header.data(), kMaskMagic, sizeof(kMaskMagic));
  std::memcpy(header.data() + 8, &count, sizeof(count));
  const std::size_t words = std::min(key.size(), kMaskKeyWords);
  if (words > 0) std::memcpy(header.data() + 16, key.data(), words * sizeof(std::int32_t));
  return header;
}

bool leaves_tokens_out(std::span<const std::uint8_t> mask) {
  return std::any_of(mask.begin(), mask.end(), [](std::uint8_t m) { return (m & kInLoss) == 0; });
}

}  // namespace strata::models
