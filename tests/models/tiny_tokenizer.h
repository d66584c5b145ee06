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

// The tiny tokenizer with ChatML's turn markers as special tokens (<|im_start|> and <|im_end|>,
// the ids after EOS) and `chat_template` in its tokenizer_config.json.
inline std::filesystem::path write_chat_tokenizer(const std::filesystem::path& folder,
                                                  const std::string& chat_template) {
  std::filesystem::create_directories(folder);
  nlohmann::json file = tiny_tokenizer_json(kTinyMerges);
  const int eos = file["added_tokens"][0]["id"].get<int>();
  for (const auto& [offset, content] : {std::pair{1, "<|im_start|>"}, {2, "<|im_end|>"}}) {
    nlohmann::json token = file["added_tokens"][0];
    token["id"] = eos + offset;
    token["content"] = content;
    file["added_tokens"].push_back(token);
  }
  std::ofstream(folder / "tokenizer.json") << file.dump();
  const nlohmann::json config = {{"tokenizer_class", "GPT2Tokenizer"},
                                 {"clean_up_tokenization_spaces", false},
                                 {"eos_token", "<|endoftext|>"},
                                 {"chat_template", chat_template}};
  std::ofstream(folder / "tokenizer_config.json") << config.dump();
  return folder;
}

// A ChatML template as Qwen's, cut down: each message between <|im_start|> ROLE and <|im_end|>.
inline constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace strata::models::testing
