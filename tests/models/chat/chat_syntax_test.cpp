// Lexing: text, whitespace control, trim_blocks and lstrip_blocks, comments, string escapes,
// generation tags, literals. Each case's expected text is what @huggingface/jinja 0.5.11 (the Jinja
// of transformers.js) renders for the same template and variables, the variables' keys in byte
// order as nlohmann::json holds them; a case with an error is one the reference raises for.
#include <gtest/gtest.h>

#include "tests/models/chat/render_case.h"

namespace strata::models::chat {
namespace {

const RenderCase kCases[] = {
    {"text_and_final_newline", "Hello\n", R"jinja({})jinja", R"jinja(Hello)jinja", nullptr},
    {"only_one_final_newline", "Hello\n\n", R"jinja({})jinja", "Hello\n", nullptr},
    {"whitespace_control_expression", "a  \n {{- 'b' -}} \n  c", R"jinja({})jinja",
     R"jinja(abc)jinja", nullptr},
    {"whitespace_control_statement", "a \n {%- if true -%} \n b \n {%- endif -%} \n c",
     R"jinja({})jinja", R"jinja(abc)jinja", nullptr},
    {"trim_blocks", "{% if true %}\nA\n{% endif %}\nB\n{# note #}\nC", R"jinja({})jinja", "A\nB\nC",
     nullptr},
    {"lstrip_blocks", "  {% if true %}\n  A\n  {% endif %}\n\t{# c #}\n  {{ 'kept' }}",
     R"jinja({})jinja", "  A\n  kept", nullptr},
    {"lstrip_not_after_text", R"jinja(x {% if true %}y{% endif %})jinja", R"jinja({})jinja",
     R"jinja(x y)jinja", nullptr},
    {"comments", R"jinja(a{# one #}b{#- two -#}  c {#- three #}d)jinja", R"jinja({})jinja",
     R"jinja(abcd)jinja", nullptr},
    {"string_escapes",
     R"jinja({{ 'a\nb\tc\'d\"e\\f' }}|{{ "\x41\u00e9\u4e16" }}|{{ '\ud83d\ude00' }})jinja",
     R"jinja({})jinja", "a\nb\tc'd\"e\\f|Aé世|😀", nullptr},
    {"adjacent_strings", R"jinja({{ 'a' "b" 'c' }})jinja", R"jinja({})jinja", R"jinja(abc)jinja",
     nullptr},
    {"generation_tag",
     R"jinja(A {% generation %} B {% endgeneration %} C|{%- generation -%} D {%- endgeneration -%} E)jinja",
     R"jinja({})jinja", R"jinja(A  B  C|DE)jinja", nullptr},
    {"numbers", R"jinja({{ 1 }} {{ 1.5 }} {{ -2 }} {{ 1.0 }} {{ -0.5 }} {{ 007 }})jinja",
     R"jinja({})jinja", R"jinja(1 1.5 -2 1.0 -0.5 7)jinja", nullptr},
    {"constants",
     R"jinja({{ true }} {{ True }} {{ false }} {{ False }}[{{ none }}][{{ None }}][{{ missing }}])jinja",
     R"jinja({})jinja", R"jinja(true true false false[][][])jinja", nullptr},
    {"literals",
     R"jinja({{ [1, 'a', none, true, 2.5] }} {{ {'k': [1, {'n': none}], 'e': {}} }} {{ (1, 2) }} {{ [] }})jinja",
     R"jinja({})jinja", nullptr, "Cannot convert to JSON: TupleValue"},
    {"dict_in_expression_braces", R"jinja({{ {'a': {'b': 1}} }})jinja", R"jinja({})jinja",
     R"jinja({"a": {"b": 1}})jinja", nullptr},
    {"expression_after_text_lines", "line1\n  {{ 'x' }}\nline3", R"jinja({})jinja",
     "line1\n  x\nline3", nullptr},
};

TEST(ChatTemplateSyntax, RendersAsTheReference) {
  for (const RenderCase& c : kCases)
    expect_renders(c);
}

}  // namespace
}  // namespace strata::models::chat
