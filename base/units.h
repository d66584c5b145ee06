#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata::base {

// "7B", "1.3B", "350M", "5e8", "1000": a count with decimal suffixes K=1e3, M=1e6, B=G=1e9,
// T=1e12, as model sizes are written. Returns nullopt when the text is not such a count, is
// negative, or is not a whole number once scaled.
std::optional<std::int64_t> parse_count(std::string_view text);

// "4G", "1M", "128K", "4096", "1.5GiB": a byte size with binary suffixes K=2^10, M=2^20,
// G=2^30, T=2^40 (an optional "B" or "iB" after the letter), as disk and buffer sizes are written.
std::optional<std::int64_t> parse_bytes(std::string_view text);

// 1536 -> "1.50 KiB"; 3 -> "3 B". For people, never parsed back.
std::string format_bytes(double bytes);

// 1.3e9 -> "1.30B"; 350e6 -> "350.00M". For people, never parsed back.
std::string format_count(double count);

}  // namespace strata::base
