#include "base/units.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace strata::base {
namespace {

// Splits "1.5GiB" into 1.5 and "GiB". std::from_chars accepts "5e8" as well.
std::optional<std::pair<double, std::string_view>> split_number(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || !std::isfinite(value) || value < 0) return std::nullopt;
  return std::pair{value, text.substr(static_cast<std::size_t>(end - text.data()))};
}

std::optional<std::int64_t> to_whole(double value) {
  // 2^63 is past every size strata deals with; refuse instead of wrapping.
  if (value >= 9.2e18 || value != std::floor(value)) return std::nullopt;
  return static_cast<std::int64_t>(value);
}

}  // namespace

std::optional<std::int64_t> parse_count(std::string_view text) {
  auto split = split_number(text);
  if (!split) return std::nullopt;
  auto [value, suffix] = *split;
  if (suffix.size() > 1) return std::nullopt;
  double scale = 1;
  if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K':
        scale = 1e3;
        break;
      case 'M':
        scale = 1e6;
        break;
      case 'B':
      case 'G':
        scale = 1e9;
        break;
      case 'T':
        scale = 1e12;
        break;
      default:
        return std::nullopt;
    }
  }
  return to_whole(std::round(value * scale * 1e6) / 1e6);
}

std::optional<std::int64_t> parse_bytes(std::string_view text) {
  auto split = split_number(text);
  if (!split) return std::nullopt;
  auto [value, suffix] = *split;
  double scale = 1;
  if (!suffix.empty()) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'B':
        scale = 1;
        break;
      case 'K':
        scale = 0x1p10;
        break;
      case 'M':
        scale = 0x1p20;
        break;
      case 'G':
        scale = 0x1p30;
        break;
      case 'T':
        scale = 0x1p40;
        break;
      default:
        return std::nullopt;
    }
    std::string_view rest = suffix.substr(1);
    if (suffix[0] == 'B' || suffix[0] == 'b') {
      if (!rest.empty()) return std::nullopt;
    } else if (!(rest.empty() || rest == "B" || rest == "iB" || rest == "b")) {
      return std::nullopt;
    }
  }
  return to_whole(value * scale);
}

std::string format_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f} B", bytes);
  return fmt::format("{:.2f} {}", bytes, kUnits[unit]);
}

std::string format_count(double count) {
  static constexpr const char* kUnits[] = {"", "K", "M", "B", "T"};
  int unit = 0;
  while (std::fabs(count) >= 1000 && unit < 4) {
    count /= 1000;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f}", count);
  return fmt::format("{:.2f}{}", count, kUnits[unit]);
}

}  // namespace strata::base
