#pragma once

// Small tokenizer files the tokenizer tests build in code: a BPE model over a vocabulary the test
// names, to which each test adds the one component it is about. No real model's tokenizer.json is
// copied here: those carry the model's licence.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "models/tokenizer/tokenizer.h"

namespace strata::models::tokenizer::testing {

using Json = nlohmann::json;
using Strings = std::vector<std::string>;
using Ids = std::vector<std::int32_t>;

// The name the tests give their file; every refusal must name it.
inline const std::string test_source = "tests/tokenizer.json";

// The characters of `text` (valid UTF-8), one string each.
inline Strings characters_of(std::string_view text) {
  Strings characters;
  for (std::size_t at = 0; at < text.size();) {
    const auto lead = static_cast<unsigned char>(text[at]);
    const std::size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    characters.emplace_back(text.substr(at, length));
    at += length;
  }
  return characters;
}

// A vocabulary giving each of `tokens` its index as id; a repeated token keeps its first id.
inline Json vocab_of(const Strings& tokens) {
  Json vocab = Json::object();
  std::int32_t id = 0;
  for (const std::string& token : tokens) {
    if (!vocab.contains(token)) vocab[token] = id++;
  }
  return vocab;
}

// GPT-2's byte-level alphabet, written out here rather than taken from the library so that the
// ByteLevel tests check it: printable Latin-1 bytes stand for themselves, the other bytes take
// U+0100 onwards in byte order. Element b is byte b's character.
inline Strings byte_level_alphabet() {
  Strings alphabet(256);
  char32_t next_extra = 0x100;
  for (int byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                           (byte >= 0xAE && byte <= 0xFF);
    const char32_t code_point = printable ? static_cast<char32_t>(byte) : next_extra++;
    std::string& out = alphabet[byte];
    if (code_point < 0x80) {
      out.push_back(static_cast<char>(code_point));
    } else {
      out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
      out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
    }
  }
  return alphabet;
}

// A tokenizer.json with a BPE model over `vocab` and `merges` and no other component.
inline Json bpe_file(Json vocab, Json merges = Json::array()) {
  Json model = {{"type", "BPE"},          {"dropout", nullptr},
                {"unk_token", nullptr},   {"continuing_subword_prefix", nullptr},
                {"fuse_unk", false},      {"end_of_word_suffix", nullptr},
                {"byte_fallback", false}, {"ignore_merges", false}};
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);
  return {{"version", "1.0"},         {"added_tokens", Json::array()}, {"normalizer", nullptr},
          {"pre_tokenizer", nullptr}, {"post_processor", nullptr},     {"decoder", nullptr},
          {"model", std::move(model)}};
}

// An entry of "added_tokens"; normalized defaults to !special, as the tokenizers write it.
inline Json added_token(const std::string& content, std::int32_t id, bool special) {
  return {{"id", id},        {"content", content},     {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", !special}, {"special", special}};
}

// A tokenizer made from a file and a tokenizer_config.json, which tells its ids back as the
// tokens they stand for, so that an expectation reads {"aa", "a"} rather than {1, 0}.
class TestTokenizer {
 public:
  explicit TestTokenizer(const Json& file, const Json& config = nullptr)
      : tokenizer_(Tokenizer::from_json_text(file.dump(), config.is_null() ? "" : config.dump(),
                                             test_source)) {
    for (const auto& [token, id] : file["model"]["vocab"].items()) {
      token_of_id_[id.get<std::int32_t>()] = token;
    }
    for (const Json& added : file["added_tokens"]) {
      token_of_id_[added["id"].get<std::int32_t>()] = added["content"].get<std::string>();
    }
  }

  Ids ids(std::string_view text, bool add_special_tokens = true) const {
    return tokenizer_.encode(text, add_special_tokens);
  }

  Strings tokens(std::string_view text, bool add_special_tokens = true) const {
    Strings tokens;
    for (const std::int32_t id : ids(text, add_special_tokens)) {
      const auto found = token_of_id_.find(id);
      tokens.push_back(found == token_of_id_.end() ? "<no token has id " + std::to_string(id) + ">"
                                                   : found->second);
    }
    return tokens;
  }

  // The ids of `tokens`, each of which the file must have.
  Ids ids_of(const Strings& tokens) const {
    Ids ids;
    for (const std::string& token : tokens) {
      const auto id = tokenizer_.token_to_id(token);
      if (!id) ADD_FAILURE() << "the test's file has no token \"" << token << "\"";
      ids.push_back(id.value_or(-1));
    }
    return ids;
  }

  std::string decode(const Strings& tokens, bool skip_special_tokens = false) const {
    return tokenizer_.decode(ids_of(tokens), skip_special_tokens);
  }

  const Tokenizer& get() const { return tokenizer_; }

 private:
  Tokenizer tokenizer_;
  std::map<std::int32_t, std::string> token_of_id_;
};

// What loading the texts of a tokenizer.json and a tokenizer_config.json refuses with: the
// UserError's message, or "no refusal".
inline std::string refusal_of_text(std::string_view file, std::string_view config = "") {
  try {
    Tokenizer::from_json_text(file, config, test_source);
  } catch (const UserError& error) {
    return error.what();
  }
  return "no refusal";
}

inline std::string refusal_of(const Json& file, const Json& config = nullptr) {
  return refusal_of_text(file.dump(), config.is_null() ? "" : config.dump());
}

// How the refusal of a component of a type strata does not implement begins, naming the
// component, the file and the type: the normalizer of tests/tokenizer.json is of type "Nmt".
inline std::string refused_type(std::string_view component, std::string_view type) {
  return "the " + std::string(component) + " of " + test_source + " is of type \"" +
         std::string(type) + "\"";
}

// Whether `pre_tokenizer` cuts `text` into `words`. The model sees each word through a
// vocabulary that holds every word of `words` whole (ignore_merges takes such a word as one
// token) and every character alone and after "##" (the continuing_subword_prefix): so a word cut
// as `words` says comes back as itself, while a word cut elsewhere comes back spelled out ("1",
// "##2", "##3" for a "123" that should have been three words), and a character the text should
// not hold as "<unk>". `added` are special tokens, matched before the pre-tokenizer runs.
inline ::testing::AssertionResult cuts_into(const Json& pre_tokenizer, std::string_view text,
                                            const Strings& words, const Strings& added = {}) {
  Strings vocabulary = {"<unk>"};
  vocabulary.insert(vocabulary.end(), words.begin(), words.end());
  std::set<std::string> characters;
  for (const std::string& word : words) {
    for (const std::string& character : characters_of(word))
      characters.insert(character);
  }
  for (const std::string& character : characters) {
    vocabulary.push_back(character);
    vocabulary.push_back("##" + character);
  }
  Json file = bpe_file(vocab_of(vocabulary));
  file["model"]["unk_token"] = "<unk>";
  file["model"]["ignore_merges"] = true;
  file["model"]["continuing_subword_prefix"] = "##";
  file["pre_tokenizer"] = pre_tokenizer;
  auto next_id = static_cast<std::int32_t>(file["model"]["vocab"].size());
  for (const std::string& token : added) {
    file["added_tokens"].push_back(added_token(token, next_id++, true));
  }
  const Strings cut = TestTokenizer(file).tokens(text);
  if (cut == words) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "cut into " << Json(cut).dump() << " rather than " << Json(words).dump();
}

// Whether `normalizer` makes `text` into `expected`. The vocabulary holds each character of both
// alone and there is no pre-tokenizer, so the tokens are the normalized text's characters; one
// outside both comes back as "<unk>".
inline ::testing::AssertionResult normalizes_to(const Json& normalizer, std::string_view text,
                                                std::string_view expected) {
  Strings vocabulary = {"<unk>"};
  for (const std::string_view part : {text, expected}) {
    for (const std::string& character : characters_of(part))
      vocabulary.push_back(character);
  }
  Json file = bpe_file(vocab_of(vocabulary));
  file["model"]["unk_token"] = "<unk>";
  file["normalizer"] = normalizer;
  std::string normalized;
  for (const std::string& token : TestTokenizer(file).tokens(text))
    normalized += token;
  if (normalized == expected) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "normalized to " << Json(normalized).dump() << " rather than " << Json(expected).dump();
}

// The text `decoder` makes of `tokens`, through a tokenizer whose vocabulary holds exactly them
// and whose config turns transformers' clean-up of spaces off, so that the decoder alone is seen.
inline std::string decoded(const Json& decoder, const Strings& tokens) {
  Json file = bpe_file(vocab_of(tokens));
  file["decoder"] = decoder;
  return TestTokenizer(file, {{"clean_up_tokenization_spaces", false}}).decode(tokens);
}

}  // namespace strata::models::tokenizer::testing
