#include "models/tokenizer/unicode_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <array>

#include "base/assert.h"
#include "base/error.h"
#include "models/tokenizer/utf8.h"

namespace strata::models::tokenizer {
namespace {

// A thread's match data (room for the whole match only: no pattern here needs its groups) and
// JIT stack. PCRE2's JIT starts with 32 KiB of stack, which a lookahead after a long run of
// white space can exhaust; 1 MiB covers runs of a million characters.
class MatchScratch {
 public:
  MatchScratch()
      : data_(pcre2_match_data_create(1, nullptr)),
        context_(pcre2_match_context_create(nullptr)),
        stack_(pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr)) {
    STRATA_ASSERT(data_ != nullptr && context_ != nullptr && stack_ != nullptr);
    pcre2_jit_stack_assign(context_, nullptr, stack_);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack_);
    pcre2_match_context_free(context_);
    pcre2_match_data_free(data_);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;

  pcre2_match_data* data() const { return data_; }
  pcre2_match_context* context() const { return context_; }

 private:
  pcre2_match_data* data_;
  pcre2_match_context* context_;
  pcre2_jit_stack* stack_;
};

MatchScratch& scratch() {
  thread_local MatchScratch thread_scratch;
  return thread_scratch;
}

pcre2_code* as_code(void* code) {
  return static_cast<pcre2_code*>(code);
}

// Oniguruma's Unicode \w: letters, marks, numbers and connector punctuation outside a class;
// inside one its tables leave out the other numbers (No, such as ½) and keep Nd and Nl.
constexpr std::string_view word_class = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr std::string_view word_class_in_class = "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}";

// What an escape letter becomes, outside a class and inside one; empty when it stays as it is.
std::array<std::string, 2> rewrite_of(char letter) {
  switch (letter) {
    case 's':
      return {"[\\s\\x{85}]", "\\s\\x{85}"};
    case 'S':
      return {"[^\\s\\x{85}]", ""};
    case 'w':
      return {fmt::format("[{}]", word_class), std::string(word_class_in_class)};
    case 'W':
      return {fmt::format("[^{}]", word_class), ""};
    default:
      return {"", ""};
  }
}

}  // namespace

std::string oniguruma_to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  int class_depth = 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const std::string rewrite = rewrite_of(pattern[i + 1])[class_depth > 0 ? 1 : 0];
      out += rewrite.empty() ? std::string(pattern.substr(i, 2)) : rewrite;
      ++i;
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the class's end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}

UnicodeRegex::UnicodeRegex(std::string_view pattern, const std::string& where, Syntax syntax)
    : where_(where) {
  const std::string translated =
      syntax == Syntax::oniguruma ? oniguruma_to_pcre2(pattern) : std::string(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error_code, message.data(), message.size());
    throw UserError(
        fmt::format("{}: the regex \"{}\" does not compile: {} (at offset {})", where, pattern,
                    reinterpret_cast<const char*>(message.data()), error_offset),
        "use a tokenizer file whose regexes the Hugging Face tokenizers accept");
  }
  // Without the JIT (a build of PCRE2 without it) matching still works, only slower.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

UnicodeRegex::~UnicodeRegex() {
  pcre2_code_free(as_code(code_));
}

UnicodeRegex::UnicodeRegex(UnicodeRegex&& other) noexcept
    : code_(other.code_), where_(std::move(other.where_)) {
  other.code_ = nullptr;
}

UnicodeRegex& UnicodeRegex::operator=(UnicodeRegex&& other) noexcept {
  if (this != &other) {
    pcre2_code_free(as_code(code_));
    code_ = other.code_;
    where_ = std::move(other.where_);
    other.code_ = nullptr;
  }
  return *this;
}

bool UnicodeRegex::find(std::string_view subject, std::size_t from, std::size_t& start,
                        std::size_t& end) const {
  MatchScratch& thread_scratch = scratch();
  const int result =
      pcre2_match(as_code(code_), reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(),
                  from, PCRE2_NO_UTF_CHECK, thread_scratch.data(), thread_scratch.context());
  if (result == PCRE2_ERROR_NOMATCH) return false;
  if (result < 0) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(result, message.data(), message.size());
    throw UserError(
        fmt::format("{}: matching its regex failed at byte {} of a text of {} bytes: {}", where_,
                    from, subject.size(), reinterpret_cast<const char*>(message.data())),
        "split the text into smaller documents");
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(thread_scratch.data());
  start = ovector[0];
  end = ovector[1];
  return true;
}

bool is_rust_word_char(char32_t code_point) {
  static const UnicodeRegex word(fmt::format("[{}]", rust_word_class), "the word-character test",
                                 UnicodeRegex::Syntax::pcre2);
  std::string text;
  append_utf8(text, code_point);
  std::size_t start = 0;
  std::size_t end = 0;
  return word.find(text, 0, start, end) && start == 0;
}

std::size_t UnicodeRegex::next_code_point_offset(std::string_view subject, std::size_t offset) {
  if (offset >= subject.size()) return subject.size() + 1;
  return offset + utf8_sequence_length(static_cast<unsigned char>(subject[offset]));
}

}  // namespace strata::models::tokenizer
