#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {
namespace {

// The range the second byte of a sequence led by `lead` must fall in, and the sequence's length;
// length 0 for a byte that leads nothing. These ranges exclude overlong forms, surrogates and
// code points past U+10FFFF (Unicode's table 3-7).
struct Lead {
  std::size_t length;
  unsigned char second_min;
  unsigned char second_max;
};

Lead lead_of(unsigned char byte) {
  if (byte < 0x80) return {1, 0, 0};
  if (byte >= 0xC2 && byte <= 0xDF) return {2, 0x80, 0xBF};
  if (byte == 0xE0) return {3, 0xA0, 0xBF};
  if (byte == 0xED) return {3, 0x80, 0x9F};
  if (byte >= 0xE1 && byte <= 0xEF) return {3, 0x80, 0xBF};
  if (byte == 0xF0) return {4, 0x90, 0xBF};
  if (byte >= 0xF1 && byte <= 0xF3) return {4, 0x80, 0xBF};
  if (byte == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// The bytes of the sequence at `offset` that are valid so far (the maximal subpart), and whether
// they form a whole sequence.
struct Prefix {
  std::size_t valid_bytes;
  bool complete;
};

Prefix valid_prefix(std::string_view bytes, std::size_t offset) {
  const Lead lead = lead_of(static_cast<unsigned char>(bytes[offset]));
  if (lead.length == 0) return {0, false};
  if (lead.length == 1) return {1, true};
  std::size_t taken = 1;
  for (; taken < lead.length && offset + taken < bytes.size(); ++taken) {
    const auto byte = static_cast<unsigned char>(bytes[offset + taken]);
    const unsigned char low = taken == 1 ? lead.second_min : 0x80;
    const unsigned char high = taken == 1 ? lead.second_max : 0xBF;
    if (byte < low || byte > high) return {taken, false};
  }
  return {taken, taken == lead.length};
}

}  // namespace

std::size_t invalid_utf8_offset(std::string_view text) {
  std::size_t offset = 0;
  while (offset < text.size()) {
    // ASCII runs are the common case; skip them a byte at a time without the table.
    if (static_cast<unsigned char>(text[offset]) < 0x80) {
      ++offset;
      continue;
    }
    const Prefix prefix = valid_prefix(text, offset);
    if (!prefix.complete) return offset;
    offset += prefix.valid_bytes;
  }
  return std::string_view::npos;
}

std::size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  return 1;
}

char32_t next_code_point(std::string_view text, std::size_t& offset) {
  const auto lead = static_cast<unsigned char>(text[offset]);
  const std::size_t length = utf8_sequence_length(lead);
  if (length == 1) {
    ++offset;
    return lead;
  }
  char32_t code_point = lead & (0x7F >> length);
  for (std::size_t i = 1; i < length; ++i) {
    code_point = (code_point << 6) | (static_cast<unsigned char>(text[offset + i]) & 0x3F);
  }
  offset += length;
  return code_point;
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string text;
  text.reserve(bytes.size());
  std::size_t offset = 0;
  while (offset < bytes.size()) {
    const Prefix prefix = valid_prefix(bytes, offset);
    if (prefix.complete) {
      text.append(bytes.substr(offset, prefix.valid_bytes));
      offset += prefix.valid_bytes;
    } else {
      text.append("\xEF\xBF\xBD");  // U+FFFD for the whole maximal subpart
      offset += prefix.valid_bytes == 0 ? 1 : prefix.valid_bytes;
    }
  }
  return text;
}

std::size_t utf8_complete_prefix(std::string_view bytes) {
  // Only the last three bytes can begin a sequence that is still incomplete.
  const std::size_t first = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (std::size_t offset = first; offset < bytes.size(); ++offset) {
    const Prefix prefix = valid_prefix(bytes, offset);
    const bool runs_to_end = offset + prefix.valid_bytes == bytes.size();
    if (prefix.valid_bytes > 0 && !prefix.complete && runs_to_end) return offset;
  }
  return bytes.size();
}

}  // namespace strata::models::tokenizer
