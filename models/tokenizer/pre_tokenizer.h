#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/tokenizer/pattern.h"

namespace strata::models::tokenizer {

// How a split treats what its pattern matched (the tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// A piece of a split's input: [start, end) and whether the split's pattern matched it (before
// its behavior is applied) or whether the piece is dropped (after).
struct SplitSpan {
  std::size_t start;
  std::size_t end;
  bool is_match;
};

// A tokenizer file's "pre_tokenizer": ByteLevel, Split, Metaspace, Digits, Punctuation,
// Whitespace, WhitespaceSplit, and Sequence of them (flattened into one list of steps). It cuts
// normalized text into the words the model tokenizes one at a time.
class PreTokenizer {
 public:
  // null gives one that passes the text on whole. Throws UserError naming `where` for a type or
  // a behavior it does not implement.
  static PreTokenizer from_json(const nlohmann::json& pre_tokenizer, const std::string& where);

  using OnWord = std::function<void(std::string_view word)>;
  // Calls on_word for each non-empty word of `text`, in order. `starts_input`: `text` begins at
  // the first byte of the encoded input (Metaspace's prepend_scheme "first" asks).
  void pre_tokenize(std::string_view text, bool starts_input, const OnWord& on_word) const;

 private:
  // A character test standing in for a pattern (Digits, Punctuation, WhitespaceSplit and
  // Metaspace's split): each matching character is one match.
  enum class CharClass { numeric, punctuation, whitespace, equal };
  struct CharTest {
    CharClass what;
    char32_t equal_to = 0;
  };
  struct ByteLevel {
    bool add_prefix_space;
    bool use_regex;
  };
  struct Split {
    std::variant<std::shared_ptr<const Pattern>, CharTest> matcher;
    SplitBehavior behavior;
    bool invert;
  };
  enum class PrependScheme { always, first, never };
  struct Metaspace {
    std::string replacement;
    char32_t replacement_char = 0;
    PrependScheme prepend_scheme = PrependScheme::always;
    bool split = true;
  };
  using Step = std::variant<ByteLevel, Split, Metaspace>;

  void add(const nlohmann::json& pre_tokenizer, const std::string& where);
  void add_metaspace(const nlohmann::json& pre_tokenizer, const std::string& where);
  void run(std::size_t step, std::string_view text, bool starts_input, const OnWord& on_word) const;
  void run_byte_level(std::size_t step, const ByteLevel& byte_level, std::string_view text,
                      bool starts_input, const OnWord& on_word) const;
  void run_metaspace(std::size_t step, const Metaspace& metaspace, std::string_view text,
                     bool starts_input, const OnWord& on_word) const;
  void run_split(std::size_t step, const Split& split, std::string_view text, bool starts_input,
                 const OnWord& on_word) const;
  // The spans of `text`, matches and the gaps between them, as the tokenizers' find_matches
  // cuts them (pre_tokenizer_split.cpp).
  static bool char_matches(char32_t code_point, const CharTest& test);
  static void find_spans(const Split& split, std::string_view text, std::vector<SplitSpan>& spans);
  // Turns matched spans into kept pieces per `behavior`; is_match then means "dropped".
  static void apply_behavior(SplitBehavior behavior, std::vector<SplitSpan>& spans);

  std::vector<Step> steps_;
  std::shared_ptr<const Pattern> gpt2_pattern_;  // made when a ByteLevel step uses its regex
};

}  // namespace strata::models::tokenizer
