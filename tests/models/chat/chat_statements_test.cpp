// Statements: if/elif/else, for (loop variables, unpacking, inline if, else, break, continue), set
// (tuples, blocks, namespaces), macros. Each case's expected text is what @huggingface/jinja 0.5.11
// (the Jinja of transformers.js) renders for the same template and variables, the variables' keys
// in byte order as nlohmann::json holds them; a case with an error is one the reference raises for.
#include <gtest/gtest.h>

#include "tests/models/chat/render_case.h"

namespace strata::models::chat {
namespace {

const RenderCase kCases[] = {
    {"if_elif_else",
     R"jinja({% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %},{% endfor %})jinja",
     R"jinja({})jinja", R"jinja(one,two,many,)jinja", nullptr},
    {"loop_attributes",
     R"jinja({% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}] {% endfor %})jinja",
     R"jinja({})jinja", R"jinja(1032truefalse3[|b] 2121falsefalse3[a|c] 3210falsetrue3[b|] )jinja",
     nullptr},
    {"loop_over_dict_keys_and_items",
     R"jinja({% for k in d %}{{ k }};{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %})jinja",
     R"jinja({"extra": {"d": {"10": 3, "2": 4, "a": 2, "b": 1}}})jinja",
     R"jinja(2;10;a;b;|2=4;10=3;a=2;b=1;|24103a2b1)jinja", nullptr},
    {"inline_filter",
     R"jinja({% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.content }} {% endfor %})jinja",
     R"jinja({"messages": [{"content": "Be kind.", "role": "system"}, {"content": "Hi", "role": "user"}, {"content": "Hello!", "role": "assistant"}]})jinja",
     R"jinja(1:Hi 2:Hello! )jinja", nullptr},
    {"for_else",
     R"jinja({% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] if x > 5 %}x{% else %}none passed{% endfor %})jinja",
     R"jinja({})jinja", R"jinja(empty|none passed)jinja", nullptr},
    {"nested_loops",
     R"jinja({% for a in [1, 2] %}{% for b in ['x', 'y'] %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}/{{ loop.index }} {% endfor %})jinja",
     R"jinja({})jinja", R"jinja(1x11y2/1 2x12y2/2 )jinja", nullptr},
    {"break_and_continue",
     R"jinja({% for x in [1, 2, 3, 4, 5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %})jinja",
     R"jinja({})jinja", R"jinja(13)jinja", nullptr},
    {"continue_drops_iteration_text",
     R"jinja({% for x in [1, 2, 3] %}A{{ x }}{% if x == 2 %}B{% continue %}{% endif %}C{% endfor %})jinja",
     R"jinja({})jinja", R"jinja(A1CA3C)jinja", nullptr},
    {"else_after_only_breaks",
     R"jinja({% for x in [1, 2] %}{% break %}{% else %}else ran{% endfor %})jinja",
     R"jinja({})jinja", R"jinja(else ran)jinja", nullptr},
    {"set_in_loop_does_not_leak",
     R"jinja({% set x = 'outer' %}{% for i in [1, 2] %}{% set x = 'inner' ~ i %}{{ x }} {% endfor %}{{ x }})jinja",
     R"jinja({})jinja", R"jinja(inner1 inner2 outer)jinja", nullptr},
    {"namespace_carries_out_of_loop",
     R"jinja({% set ns = namespace(count=0, seen='') %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% set ns.seen = ns.seen + m.role[0] %}{% endfor %}{{ ns.count }} {{ ns.seen }} {{ ns }})jinja",
     R"jinja({"messages": [{"content": "Be kind.", "role": "system"}, {"content": "Hi", "role": "user"}, {"content": "Hello!", "role": "assistant"}]})jinja",
     R"jinja(3 sua {"count": 3, "seen": "sua"})jinja", nullptr},
    {"namespace_from_dict_and_pairs",
     R"jinja({% set a = namespace({'x': 1}, y=2) %}{% set b = namespace([['p', 3], 'qr']) %}{{ a.x }}{{ a.y }}{{ b.p }}{{ b.q }})jinja",
     R"jinja({})jinja", R"jinja(123r)jinja", nullptr},
    {"set_tuple_and_block",
     "{% set a, b = 1, 'two' %}{{ a }}{{ b }}|{% set c, d = [3, 4] %}{{ c + d }}|{% set block %}  "
     "x {{ a }}\n{% endset %}[{{ block }}]",
     R"jinja({})jinja", "1two|7|[  x 1\n]", nullptr},
    {"set_in_if_is_visible_after",
     R"jinja({% if true %}{% set shown = 'yes' %}{% endif %}{{ shown }})jinja", R"jinja({})jinja",
     R"jinja(yes)jinja", nullptr},
    {"macro_defaults_and_keywords",
     R"jinja({% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet('Cy', punct='?') }})jinja",
     R"jinja({})jinja", R"jinja(Hello, Ann! Hi, Bob! Hello, Cy?)jinja", nullptr},
    {"macro_kwargs_and_varargs",
     R"jinja({% macro f(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, k='v') }})jinja",
     R"jinja({})jinja", R"jinja(1|[2, 3]|{"k": "v"})jinja", nullptr},
    {"macro_sees_caller_scope",
     R"jinja({% macro show() %}{{ value }}{% endmacro %}{% for value in ['a', 'b'] %}{{ show() }}{% endfor %})jinja",
     R"jinja({})jinja", R"jinja(ab)jinja", nullptr},
    {"macro_recursion",
     R"jinja({% macro count(n) %}{{ n }}{% if n > 0 %}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(3) }})jinja",
     R"jinja({})jinja", R"jinja(3210)jinja", nullptr},
    {"macro_default_uses_parameter",
     R"jinja({% macro f(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ f(2) }} {{ f(2, 5) }})jinja",
     R"jinja({})jinja", R"jinja(2,4 2,5)jinja", nullptr},
    {"macro_result_is_a_string",
     R"jinja({% macro m() %}12{% endmacro %}{{ m() + '3' }} {{ m() | length }})jinja",
     R"jinja({})jinja", R"jinja(123 2)jinja", nullptr},
};

TEST(ChatTemplateStatements, RendersAsTheReference) {
  for (const RenderCase& c : kCases)
    expect_renders(c);
}

}  // namespace
}  // namespace strata::models::chat
