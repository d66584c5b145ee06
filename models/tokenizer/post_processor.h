#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata::models::tokenizer {

// A tokenizer file's "post_processor", for one sequence: TemplateProcessing's "single" template,
// RobertaProcessing and BertProcessing (cls, the sequence, sep), ByteLevel (nothing to ids), and
// Sequence of them. It adds the special tokens that encoding with special tokens adds.
class PostProcessor {
 public:
  // Throws UserError naming `where` for a type it does not implement.
  static PostProcessor from_json(const nlohmann::json& post_processor, const std::string& where);
  // The template transformers' Llama and Gemma tokenizers build from add_bos_token and
  // add_eos_token: [bos] sequence [eos].
  static PostProcessor bos_eos(std::vector<std::int32_t> bos_ids,
                               std::vector<std::int32_t> eos_ids);

  // `ids` wrapped in the special tokens of each template, first to last.
  void add_special_tokens(std::vector<std::int32_t>& ids) const;

 private:
  // One template: the ids before the sequence and the ids after it.
  struct Wrap {
    std::vector<std::int32_t> before;
    std::vector<std::int32_t> after;
  };
  void add(const nlohmann::json& post_processor, const std::string& where);
  void add_template(const nlohmann::json& post_processor, const std::string& where);
  std::vector<Wrap> wraps_;
};

}  // namespace strata::models::tokenizer
