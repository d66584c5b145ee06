// How a split cuts its input: the spans its pattern matches, then its behavior, as the
// tokenizers' NormalizedString::split does.
#include "models/tokenizer/pre_tokenizer.h"
#include "models/tokenizer/unicode_chars.h"
#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {

bool PreTokenizer::char_matches(char32_t code_point, const CharTest& test) {
  switch (test.what) {
    case CharClass::numeric:
      return is_numeric(code_point);
    case CharClass::punctuation:
      return is_punctuation(code_point);
    case CharClass::whitespace:
      return is_whitespace(code_point);
    case CharClass::equal:
      return code_point == test.equal_to;
  }
  return false;
}

void PreTokenizer::find_spans(const Split& split, std::string_view text,
                              std::vector<SplitSpan>& spans) {
  spans.clear();
  std::size_t previous_end = 0;
  const auto add_match = [&](std::size_t start, std::size_t end) {
    if (previous_end != start) spans.push_back({previous_end, start, false});
    spans.push_back({start, end, true});
    previous_end = end;
  };
  if (const auto* pattern = std::get_if<std::shared_ptr<const Pattern>>(&split.matcher)) {
    (*pattern)->for_each_match(text, add_match);
  } else {
    const CharTest& test = std::get<CharTest>(split.matcher);
    std::size_t offset = 0;
    while (offset < text.size()) {
      const std::size_t start = offset;
      if (char_matches(next_code_point(text, offset), test)) add_match(start, offset);
    }
  }
  if (previous_end != text.size()) spans.push_back({previous_end, text.size(), false});
}

void PreTokenizer::apply_behavior(SplitBehavior behavior, std::vector<SplitSpan>& spans) {
  if (behavior == SplitBehavior::removed) return;  // matches are the dropped spans already
  if (behavior == SplitBehavior::isolated) {
    for (SplitSpan& span : spans)
      span.is_match = false;
    return;
  }
  std::vector<SplitSpan> kept;
  kept.reserve(spans.size());
  bool previous_match = false;
  if (behavior == SplitBehavior::merged_with_next) {
    // A match joins the piece after it: walk backwards, growing the later piece leftwards.
    for (auto span = spans.rbegin(); span != spans.rend(); ++span) {
      if (span->is_match && !previous_match && !kept.empty()) {
        kept.back().start = span->start;
      } else {
        kept.push_back({span->start, span->end, false});
      }
      previous_match = span->is_match;
    }
    spans.assign(kept.rbegin(), kept.rend());
    return;
  }
  for (const SplitSpan& span : spans) {
    const bool joins_previous = behavior == SplitBehavior::contiguous
                                    ? span.is_match == previous_match
                                    : span.is_match && !previous_match;
    if (joins_previous && !kept.empty()) {
      kept.back().end = span.end;
    } else {
      kept.push_back({span.start, span.end, false});
    }
    previous_match = span.is_match;
  }
  spans = std::move(kept);
}

}  // namespace strata::models::tokenizer
