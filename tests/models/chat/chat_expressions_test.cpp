// Expressions: arithmetic as JavaScript numbers, ~ and +, loose ==, comparisons, in, logic,
// conditionals, members, slices, precedence, printing. Each case's expected text is what
// @huggingface/jinja 0.5.11 (the Jinja of transformers.js) renders for the same template and
// variables, the variables' keys in byte order as nlohmann::json holds them; a case with an error
// is one the reference raises for.
#include <gtest/gtest.h>

#include "tests/models/chat/render_case.h"

namespace strata::models::chat {
namespace {

const RenderCase kCases[] = {
    {"arithmetic",
     R"jinja({{ 7 + 2 }} {{ 7 - 2 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 8 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 7.0 // 2 }} {{ 1 / 3 }})jinja",
     R"jinja({})jinja",
     R"jinja(9 5 14 3.5 4.0 3 -4 1 -1 1024 0.5 64 2.5 0.30000000000000004 3.0 0.3333333333333333)jinja",
     nullptr},
    {"big_and_small_numbers",
     R"jinja({{ 10 ** 21 }} {{ 10 ** 20 }} {{ 2 ** 60 }} {{ 1 / 10 ** 7 }} {{ 1.0 * 10 ** 21 }} {{ 123456789.125 }} {{ 1 / 0 }} {{ -1 / 0 }})jinja",
     R"jinja({})jinja",
     R"jinja(1e+21 100000000000000000000 1152921504606847000 1e-7 1e+21 123456789.125 Infinity -Infinity)jinja",
     nullptr},
    {"unary_signs", R"jinja({{ -(3) }} {{ +4 }} {{ -(1.5) }} {{ - true }} {{ -x|abs }})jinja",
     R"jinja({"extra": {"x": 3}})jinja", R"jinja(-3 4 -1.5 -1 3)jinja", nullptr},
    {"concat_tilde", R"jinja({{ 1 ~ 'a' ~ 2.0 ~ 2.5 ~ true ~ [1, 'b'] ~ {'k': 1} }})jinja",
     R"jinja({})jinja", R"jinja(1a22.5true1,b[object Map])jinja", nullptr},
    {"plus_with_strings",
     R"jinja({{ 'a' + 1 }} {{ 2.0 + 'b' }} {{ 'c' + true }} {{ [1] + [2, 3] }})jinja",
     R"jinja({})jinja", R"jinja(a1 2b ctrue [1, 2, 3])jinja", nullptr},
    {"equality_is_loose",
     R"jinja({{ 1 == 1.0 }} {{ '1' == 1 }} {{ '' == 0 }} {{ true == 1 }} {{ none == missing }} {{ none == 0 }} {{ [1] == [1] }} {{ l == l }} {{ [1, 2] == '1,2' }} {{ 'a' != 'b' }})jinja",
     R"jinja({"extra": {"l": [1]}})jinja",
     R"jinja(true true true true true false false true true true)jinja", nullptr},
    {"comparisons", R"jinja({{ 2 > 1 }} {{ 1 >= 1 }} {{ 1 < 0.5 }} {{ 3 <= 2.5 }})jinja",
     R"jinja({})jinja", R"jinja(true true false false)jinja", nullptr},
    {"membership",
     R"jinja({{ 1 in [1, 2] }} {{ '1' in [1] }} {{ 'b' in 'abc' }} {{ 'k' in {'k': 0} }} {{ 'z' not in 'abc' }} {{ 'x' in missing }} {{ 'x' not in missing }} {{ none in [none] }})jinja",
     R"jinja({})jinja", nullptr, "Cannot perform operation on null values"},
    {"logic_returns_operands",
     R"jinja({{ 0 or 'x' }} {{ 'a' and 'b' }} {{ [] or {} or 'last' }} {{ not [] }} {{ not not 'a' }} {{ none and 1 }}|{{ '' or none }}|)jinja",
     R"jinja({})jinja", R"jinja(x b last true true ||)jinja", nullptr},
    {"conditional_expressions",
     R"jinja({{ 'y' if true else 'n' }}[{{ 'y' if false }}]{{ 'a' if 0 else 'b' if 1 else 'c' }})jinja",
     R"jinja({})jinja", R"jinja(y[]b)jinja", nullptr},
    {"member_and_subscript",
     R"jinja({{ d.k }} {{ d['k'] }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} {{ s[1] }} {{ s[-1] }} {{ s.length }} {{ l.length }} [{{ l[9] }}] [{{ d.missing }}] [{{ missing.x }}] [{{ none.x }}])jinja",
     R"jinja({"extra": {"d": {"k": "v"}, "l": [10, 20, 30], "s": "héllo"}})jinja",
     R"jinja(v v 10 30 20 é o 5 3 [] [] [] [])jinja", nullptr},
    {"dict_key_before_method", R"jinja({{ d.items }} {{ d.get('items') }})jinja",
     R"jinja({"extra": {"d": {"items": "own"}}})jinja", R"jinja(own own)jinja", nullptr},
    {"slices",
     R"jinja({{ l[1:3] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[:2] }} {{ l[::2] }} {{ l[3:0:-1] }} {{ l[5:-1:-1] }} {{ s[1:4] }} {{ s[::-1] }} {{ messages[1:] | length }})jinja",
     R"jinja({"extra": {"l": [0, 1, 2, 3, 4, 5], "s": "añb😀c"}, "messages": [{"content": "Be kind.", "role": "system"}, {"content": "Hi", "role": "user"}, {"content": "Hello!", "role": "assistant"}]})jinja",
     R"jinja([1, 2] [5, 4, 3, 2, 1, 0] [4, 5] [0, 1] [0, 2, 4] [3, 2, 1] [5, 4, 3, 2, 1, 0] ñb😀 c😀bña 2)jinja",
     nullptr},
    {"precedence",
     R"jinja({{ 'a' + 'b' | upper }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ (1 + 2) is odd }} {{ not 1 == 2 }} {{ 2 * 3 ** 2 }} {{ 'x' ~ 1 + 2 }})jinja",
     R"jinja({})jinja", R"jinja(aB 7 9 true true 18 x12)jinja", nullptr},
    {"printing_values",
     R"jinja({{ 2.0 }} {{ 2.50 }} {{ [2.0, 'é', none, true] }} {{ {'a': [], 'b': {}} }} {{ messages[0] }})jinja",
     R"jinja({"messages": [{"content": "Be kind.", "role": "system"}, {"content": "Hi", "role": "user"}, {"content": "Hello!", "role": "assistant"}]})jinja",
     R"jinja(2.0 2.5 [2, "é", null, true] {"a": [], "b": {}} {"content": "Be kind.", "role": "system"})jinja",
     nullptr},
    {"utf16_length_and_index", R"jinja({{ s | length }} {{ s.length }} {{ s[0] }}{{ s[1] }})jinja",
     R"jinja({"extra": {"s": "é😀x"}})jinja", R"jinja(4 4 é�)jinja", nullptr},
    {"messages_like_the_templates",
     R"jinja({{ messages[0]['role'] }} {{ messages[-1].content }} {{ (messages | length) - 1 }} {{ messages[1:] | length }})jinja",
     R"jinja({"messages": [{"content": "Be kind.", "role": "system"}, {"content": "Hi", "role": "user"}, {"content": "Hello!", "role": "assistant"}]})jinja",
     R"jinja(system Hello! 2 2)jinja", nullptr},
};

TEST(ChatTemplateExpressions, RendersAsTheReference) {
  for (const RenderCase& c : kCases)
    expect_renders(c);
}

}  // namespace
}  // namespace strata::models::chat
