#include "models/tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "models/tokenizer/json_fields.h"
#include "models/tokenizer/overloaded.h"
#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {
namespace {

// `text` without leading and/or trailing white space (char::is_whitespace).
std::string strip(std::string_view text, bool left, bool right) {
  std::size_t begin = 0;
  std::size_t end = text.size();
  if (left) {
    while (begin < end) {
      std::size_t next = begin;
      if (!is_whitespace(next_code_point(text, next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      std::size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
        --start;
      std::size_t next = start;
      if (!is_whitespace(next_code_point(text, next))) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& normalizer, const std::string& where) {
  Normalizer made;
  if (!normalizer.is_null()) made.add(normalizer, where);
  return made;
}

void Normalizer::add(const nlohmann::json& normalizer, const std::string& where) {
  const std::string type = type_of(normalizer, where);
  if (type == "Sequence") {
    for (const auto& inner : required_field<nlohmann::json>(normalizer, "normalizers", where)) {
      add(inner, where);
    }
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    const NormalForm form = type == "NFC"    ? NormalForm::nfc
                            : type == "NFD"  ? NormalForm::nfd
                            : type == "NFKC" ? NormalForm::nfkc
                                             : NormalForm::nfkd;
    steps_.emplace_back(Unicode{form});
  } else if (type == "Prepend") {
    steps_.emplace_back(Prepend{required_field<std::string>(normalizer, "prepend", where)});
  } else if (type == "Replace") {
    steps_.emplace_back(Replace{
        Pattern::from_json(required_field<nlohmann::json>(normalizer, "pattern", where), where),
        required_field<std::string>(normalizer, "content", where)});
  } else if (type == "Strip") {
    steps_.emplace_back(Strip{field_or(normalizer, "strip_left", true, where),
                              field_or(normalizer, "strip_right", true, where)});
  } else if (type == "Lowercase") {
    steps_.emplace_back(Lowercase{});
  } else {
    refuse_component(where, type);
  }
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string out(text);
  for (const Step& step : steps_) {
    std::visit(Overloaded{
                   [&](const Unicode& unicode) { out = normalize_unicode(out, unicode.form); },
                   // Prepend leaves an empty text empty, as the tokenizers' Prepend does.
                   [&](const Prepend& prepend) {
                     if (!out.empty()) out.insert(0, prepend.prefix);
                   },
                   [&](const Replace& replace) {
                     out = replace.pattern.replace_all(out, replace.content);
                   },
                   [&](const Strip& how) { out = strip(out, how.left, how.right); },
                   [&](const Lowercase&) { out = lowercase(out); },
               },
               step);
  }
  return out;
}

}  // namespace strata::models::tokenizer
