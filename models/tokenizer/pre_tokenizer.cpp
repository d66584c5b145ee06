#include "models/tokenizer/pre_tokenizer.h"

#include <deque>
#include <nlohmann/json.hpp>

#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/json_fields.h"
#include "models/tokenizer/unicode_chars.h"
#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {
namespace {

// What one step of a thread's pre-tokenization holds while the steps after it run: the spans it
// cut, the text it rewrote and the word it mapped. A deque, so that growing it for a deeper
// step never moves the frame of a step still running.
struct Frame {
  std::vector<SplitSpan> spans;
  std::string rewritten;
  std::string mapped;
};

Frame& frame_at(std::size_t step) {
  thread_local std::deque<Frame> frames;
  while (frames.size() <= step)
    frames.emplace_back();
  return frames[step];
}

SplitBehavior behavior_of(const std::string& name, const std::string& where) {
  if (name == "Removed") return SplitBehavior::removed;
  if (name == "Isolated") return SplitBehavior::isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (name == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (name == "Contiguous") return SplitBehavior::contiguous;
  refuse_field(where, "behavior",
               fmt::format("is \"{}\", not Removed, Isolated, MergedWithPrevious, "
                           "MergedWithNext or Contiguous",
                           name));
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& pre_tokenizer,
                                     const std::string& where) {
  PreTokenizer made;
  if (!pre_tokenizer.is_null()) made.add(pre_tokenizer, where);
  return made;
}

void PreTokenizer::add(const nlohmann::json& pre_tokenizer, const std::string& where) {
  const std::string type = type_of(pre_tokenizer, where);
  if (type == "Sequence") {
    for (const auto& inner :
         required_field<nlohmann::json>(pre_tokenizer, "pretokenizers", where)) {
      add(inner, where);
    }
  } else if (type == "ByteLevel") {
    const ByteLevel byte_level{field_or(pre_tokenizer, "add_prefix_space", true, where),
                               field_or(pre_tokenizer, "use_regex", true, where)};
    if (byte_level.use_regex && gpt2_pattern_ == nullptr) {
      gpt2_pattern_ = std::make_shared<const Pattern>(
          Pattern::from_json({{"Regex", std::string(gpt2_split_regex)}}, where));
    }
    steps_.emplace_back(byte_level);
  } else if (type == "Split") {
    steps_.emplace_back(
        Split{std::make_shared<const Pattern>(Pattern::from_json(
                  required_field<nlohmann::json>(pre_tokenizer, "pattern", where), where)),
              behavior_of(required_field<std::string>(pre_tokenizer, "behavior", where), where),
              field_or(pre_tokenizer, "invert", false, where)});
  } else if (type == "Metaspace") {
    add_metaspace(pre_tokenizer, where);
  } else if (type == "Digits") {
    const bool individual = field_or(pre_tokenizer, "individual_digits", false, where);
    steps_.emplace_back(Split{CharTest{CharClass::numeric},
                              individual ? SplitBehavior::isolated : SplitBehavior::contiguous,
                              false});
  } else if (type == "Punctuation") {
    const auto behavior = field_or<std::string>(pre_tokenizer, "behavior", "Isolated", where);
    steps_.emplace_back(
        Split{CharTest{CharClass::punctuation}, behavior_of(behavior, where), false});
  } else if (type == "Whitespace") {
    // The tokenizers' Whitespace keeps the matches of \w+|[^\w\s]+ and drops the rest, run on
    // Rust's regex crate: its \w and \s, spelled out for PCRE2.
    const std::string regex = fmt::format(R"([{0}]+|[^{0}\p{{White_Space}}]+)", rust_word_class);
    steps_.emplace_back(Split{std::make_shared<const Pattern>(Pattern::pcre2_regex(regex, where)),
                              SplitBehavior::removed, true});
  } else if (type == "WhitespaceSplit") {
    steps_.emplace_back(Split{CharTest{CharClass::whitespace}, SplitBehavior::removed, false});
  } else {
    refuse_component(where, type);
  }
}

void PreTokenizer::add_metaspace(const nlohmann::json& pre_tokenizer, const std::string& where) {
  Metaspace metaspace;
  metaspace.replacement = field_or<std::string>(pre_tokenizer, "replacement", "\u2581", where);
  metaspace.replacement_char = one_char_field(metaspace.replacement, "replacement", where);
  // Files written before prepend_scheme existed say add_prefix_space instead.
  const bool add_prefix_space = field_or(pre_tokenizer, "add_prefix_space", true, where);
  const auto scheme = field_or<std::string>(pre_tokenizer, "prepend_scheme",
                                            add_prefix_space ? "always" : "never", where);
  if (scheme == "always") {
    metaspace.prepend_scheme = PrependScheme::always;
  } else if (scheme == "first") {
    metaspace.prepend_scheme = PrependScheme::first;
  } else if (scheme == "never") {
    metaspace.prepend_scheme = PrependScheme::never;
  } else {
    refuse_field(where, "prepend_scheme",
                 fmt::format("is \"{}\", not always, first or never", scheme));
  }
  metaspace.split = field_or(pre_tokenizer, "split", true, where);
  steps_.emplace_back(std::move(metaspace));
}

void PreTokenizer::pre_tokenize(std::string_view text, bool starts_input,
                                const OnWord& on_word) const {
  if (!text.empty()) run(0, text, starts_input, on_word);
}

void PreTokenizer::run(std::size_t step, std::string_view text, bool starts_input,
                       const OnWord& on_word) const {
  if (step == steps_.size()) {
    on_word(text);
    return;
  }
  std::visit(
      [&](const auto& how) {
        using How = std::decay_t<decltype(how)>;
        if constexpr (std::is_same_v<How, ByteLevel>) {
          run_byte_level(step, how, text, starts_input, on_word);
        } else if constexpr (std::is_same_v<How, Metaspace>) {
          run_metaspace(step, how, text, starts_input, on_word);
        } else {
          run_split(step, how, text, starts_input, on_word);
        }
      },
      steps_[step]);
}

void PreTokenizer::run_byte_level(std::size_t step, const ByteLevel& byte_level,
                                  std::string_view text, bool starts_input,
                                  const OnWord& on_word) const {
  Frame& frame = frame_at(step);
  if (byte_level.add_prefix_space && text.front() != ' ') {
    frame.rewritten.assign(1, ' ');
    frame.rewritten.append(text);
    text = frame.rewritten;
  }
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  const auto pass_on = [&](std::size_t start, std::size_t end) {
    if (start == end) return;
    frame.mapped.clear();
    alphabet.append_mapped(frame.mapped, text.substr(start, end - start));
    run(step + 1, frame.mapped, starts_input && start == 0, on_word);
  };
  if (!byte_level.use_regex) {
    pass_on(0, text.size());
    return;
  }
  // Isolated: every match and every gap between matches is a word of its own.
  std::size_t previous_end = 0;
  gpt2_pattern_->for_each_match(text, [&](std::size_t start, std::size_t end) {
    pass_on(previous_end, start);
    pass_on(start, end);
    previous_end = end;
  });
  pass_on(previous_end, text.size());
}

void PreTokenizer::run_metaspace(std::size_t step, const Metaspace& metaspace,
                                 std::string_view text, bool starts_input,
                                 const OnWord& on_word) const {
  Frame& frame = frame_at(step);
  frame.rewritten.clear();
  for (const char c : text) {
    if (c == ' ') {
      frame.rewritten += metaspace.replacement;
    } else {
      frame.rewritten += c;
    }
  }
  const bool prepend = metaspace.prepend_scheme == PrependScheme::always ||
                       (metaspace.prepend_scheme == PrependScheme::first && starts_input);
  if (prepend && !frame.rewritten.starts_with(metaspace.replacement)) {
    frame.rewritten.insert(0, metaspace.replacement);
  }
  if (!metaspace.split) {
    run(step + 1, frame.rewritten, starts_input, on_word);
    return;
  }
  const Split split{CharTest{CharClass::equal, metaspace.replacement_char},
                    SplitBehavior::merged_with_next, false};
  run_split(step, split, frame.rewritten, starts_input, on_word);
}

void PreTokenizer::run_split(std::size_t step, const Split& split, std::string_view text,
                             bool starts_input, const OnWord& on_word) const {
  std::vector<SplitSpan>& spans = frame_at(step).spans;
  find_spans(split, text, spans);
  if (split.invert) {
    for (SplitSpan& span : spans)
      span.is_match = !span.is_match;
  }
  apply_behavior(split.behavior, spans);
  for (const SplitSpan& span : spans) {
    if (span.is_match || span.start == span.end) continue;  // dropped, or empty
    run(step + 1, text.substr(span.start, span.end - span.start), starts_input && span.start == 0,
        on_word);
  }
}

}  // namespace strata::models::tokenizer
