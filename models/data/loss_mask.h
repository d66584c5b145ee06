#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "base/mapped_file.h"

namespace strata::models {

// The loss mask beside a token stream: one byte per token, its bits below. A token file PATH has
// its mask in PATH.mask when it has one (written by `strata tokenize --output` for prompt and
// completion or conversation lines, and by the token cache always): a 64-byte header (the magic
// "strmask1", the token count as uint64, then 8 int32 words of the token cache's key, the rest
// zero), then the bytes.
inline constexpr std::uint8_t kInLoss = 1;        // the token is a target the loss counts
inline constexpr std::uint8_t kExampleStart = 2;  // the first token of an example (a line)
// The target id of a position the loss leaves out (PyTorch's ignore_index, strata's -1): the
// classifier adds no loss and no gradient for it.
inline constexpr std::int32_t kIgnoredTarget = -1;

inline constexpr std::size_t kMaskHeaderBytes = 64;
inline constexpr std::size_t kMaskKeyWords = 8;

// PATH.mask.
std::filesystem::path mask_path(const std::filesystem::path& token_file);

// A mask file mapped, its header read. Empty (no bytes) when there is none.
struct MaskFile {
  base::MappedFile mapping;
  std::span<const std::uint8_t> bytes;  // one per token
  std::span<const std::int32_t> key;    // kMaskKeyWords words
};

// The mask of `token_file` when PATH.mask exists. Throws UserError naming both files when it is
// not a mask file or holds a count other than `token_count`.
MaskFile open_mask(const std::filesystem::path& token_file, std::size_t token_count);

// The header of a mask file of `count` tokens made under `key` (up to kMaskKeyWords words).
std::array<std::byte, kMaskHeaderBytes> mask_header(std::uint64_t count,
                                                    std::span<const std::int32_t> key);

// Whether any token of `mask` is left out of the loss.
bool leaves_tokens_out(std::span<const std::uint8_t> mask);

}  // namespace strata::models
