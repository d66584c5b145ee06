#pragma once

// A byte-level BPE tokenizer folder of the project's own, as save_pretrained lays one out
// (tokenizer.json and tokenizer_config.json): the 256 byte characters as ids 0-255, the merges
// below, and <|endoftext|> as the end-of-sequence token. Small enough to reason about by hand.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "models/tokenizer/byte_level.h"

namespace strata::models::testing {

// `merges` as "a b" pairs of byte-level texts; each merged token gets the next id. EOS is last.
inline nlohmann::json tiny_tokenizer_json(
    const std::vector<std::pair<std::string, std::string>>& merges) {
  const auto& alphabet = tokenizer::ByteLevelAlphabet::get();
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte)
    vocab[alphabet.char_of(static_cast<unsigned char>(byte))] = byte;
  nlohmann::json merge_list = nlohmann::json::array();
  int next_id = 256;
  for (const auto& [left, right] : merges) {
    merge_list.push_back(left + " " + right);
    vocab[left + right] = next_id++;
  }
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", true},
                                     {"use_regex", true}};
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", next_id},
             {"content", "<|endoftext|>"},
             {"single_word", false},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", false},
             {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", merge_list},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false}}}};
}

inline const std::vector<std::pair<std::string, std::string>> kTinyMerges = {
    {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}};

// Writes the folder at `folder` (created) and returns it.
inline std::filesystem::path write_tiny_tokenizer(
    const std::filesystem::path& folder,
    const std::vector<std::pair<std::string, std::string>>& merges = kTinyMerges,
    const std::string& eos_token = "<|endoftext|>") {
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "tokenizer.json") << tiny_tokenizer_json(merges).dump();
  nlohmann::json config = {{"tokenizer_class", "GPT2Tokenizer"},
                           {"clean_up_tokenization_spaces", false}};
  if (!eos_token.empty()) config["eos_token"] = eos_token;
  std::ofstream(folder / "tokenizer_config.json") << config.dump();
  return folder;
}

}  // namespace strata::models::testing
