#include "models/tokenizer/decoder.h"

#include <cctype>
#include <nlohmann/json.hpp>

#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/json_fields.h"
#include "models/tokenizer/overloaded.h"
#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {
namespace {

std::vector<char32_t> code_points(std::string_view text) {
  std::vector<char32_t> out;
  std::size_t offset = 0;
  while (offset < text.size())
    out.push_back(next_code_point(text, offset));
  return out;
}

// ByteLevel: all tokens' characters back to bytes, as one text. A token holding a character
// outside the alphabet (an added token) is taken as its own bytes.
std::vector<std::string> byte_level(const std::vector<std::string>& tokens) {
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  std::string bytes;
  for (const std::string& token : tokens) {
    std::string mapped;
    bool all_mapped = true;
    std::size_t offset = 0;
    while (offset < token.size() && all_mapped) {
      const int byte = alphabet.byte_of(next_code_point(token, offset));
      all_mapped = byte >= 0;
      mapped.push_back(static_cast<char>(byte));
    }
    bytes += all_mapped ? mapped : token;
  }
  return {utf8_lossy(bytes)};
}

// ByteFallback: runs of <0xNN> tokens become the text of their bytes, or one U+FFFD per byte
// when those bytes are not valid UTF-8.
std::vector<std::string> byte_fallback(const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string pending;
  const auto flush = [&] {
    if (pending.empty()) return;
    if (invalid_utf8_offset(pending) == std::string_view::npos) {
      out.push_back(pending);
    } else {
      for (std::size_t i = 0; i < pending.size(); ++i)
        out.emplace_back("\xEF\xBF\xBD");
    }
    pending.clear();
  };
  for (const std::string& token : tokens) {
    const bool is_byte = token.size() == 6 && token.starts_with("<0x") && token.ends_with('>') &&
                         std::isxdigit(static_cast<unsigned char>(token[3])) &&
                         std::isxdigit(static_cast<unsigned char>(token[4]));
    if (is_byte) {
      pending.push_back(static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16)));
      continue;
    }
    flush();
    out.push_back(token);
  }
  flush();
  return out;
}

std::string strip(const std::string& token, char32_t content, std::size_t start, std::size_t stop) {
  const std::vector<char32_t> chars = code_points(token);
  std::size_t begin = 0;
  while (begin < chars.size() && begin < start && chars[begin] == content)
    ++begin;
  std::size_t end = chars.size();
  while (end > begin && chars.size() - end < stop && chars[end - 1] == content)
    --end;
  std::string out;
  for (std::size_t i = begin; i < end; ++i)
    append_utf8(out, chars[i]);
  return out;
}

std::string metaspace(const std::string& token, char32_t replacement, bool drop) {
  std::string out;
  std::size_t offset = 0;
  while (offset < token.size()) {
    const char32_t code_point = next_code_point(token, offset);
    if (code_point != replacement) {
      append_utf8(out, code_point);
    } else if (!drop) {
      out += ' ';
    }
  }
  return out;
}

}  // namespace

Decoder Decoder::from_json(const nlohmann::json& decoder, const std::string& where) {
  Decoder made;
  if (decoder.is_null()) {
    made.join_with_spaces_ = true;
  } else {
    made.add(decoder, where);
  }
  return made;
}

void Decoder::add(const nlohmann::json& decoder, const std::string& where) {
  const std::string type = type_of(decoder, where);
  if (type == "Sequence") {
    for (const auto& inner : required_field<nlohmann::json>(decoder, "decoders", where)) {
      add(inner, where);
    }
  } else if (type == "ByteLevel") {
    steps_.emplace_back(ByteLevel{});
  } else if (type == "Replace") {
    steps_.emplace_back(Replace{
        Pattern::from_json(required_field<nlohmann::json>(decoder, "pattern", where), where),
        required_field<std::string>(decoder, "content", where)});
  } else if (type == "ByteFallback") {
    steps_.emplace_back(ByteFallback{});
  } else if (type == "Fuse") {
    steps_.emplace_back(Fuse{});
  } else if (type == "Strip") {
    steps_.emplace_back(Strip{
        one_char_field(required_field<std::string>(decoder, "content", where), "content", where),
        field_or<std::size_t>(decoder, "start", 0, where),
        field_or<std::size_t>(decoder, "stop", 0, where)});
  } else if (type == "Metaspace") {
    const auto replacement = field_or<std::string>(decoder, "replacement", "\u2581", where);
    const bool add_prefix_space = field_or(decoder, "add_prefix_space", true, where);
    const auto scheme = field_or<std::string>(decoder, "prepend_scheme",
                                              add_prefix_space ? "always" : "never", where);
    steps_.emplace_back(
        Metaspace{one_char_field(replacement, "replacement", where), scheme != "never"});
  } else if (type == "BPEDecoder") {
    steps_.emplace_back(BpeSuffix{field_or<std::string>(decoder, "suffix", "</w>", where)});
  } else {
    refuse_component(where, type);
  }
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  for (const Step& step : steps_) {
    std::visit(
        Overloaded{
            [&](const ByteLevel&) { tokens = byte_level(tokens); },
            [&](const Replace& replace) {
              for (std::string& token : tokens) {
                token = replace.pattern.replace_all(token, replace.content);
              }
            },
            [&](const ByteFallback&) { tokens = byte_fallback(tokens); },
            [&](const Fuse&) {
              std::string fused;
              for (const std::string& token : tokens)
                fused += token;
              tokens = {fused};
            },
            [&](const Strip& how) {
              for (std::string& token : tokens)
                token = strip(token, how.content, how.start, how.stop);
            },
            [&](const Metaspace& how) {
              for (std::size_t i = 0; i < tokens.size(); ++i) {
                tokens[i] = metaspace(tokens[i], how.replacement, i == 0 && how.strip_first);
              }
            },
            [&](const BpeSuffix& how) {
              for (std::size_t i = 0; i < tokens.size(); ++i) {
                const Pattern suffix = Pattern::from_json({{"String", how.suffix}}, "BPEDecoder");
                tokens[i] = suffix.replace_all(tokens[i], i + 1 == tokens.size() ? "" : " ");
              }
            },
        },
        step);
  }
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (join_with_spaces_ && i > 0) text += ' ';
    text += tokens[i];
  }
  return text;
}

}  // namespace strata::models::tokenizer
