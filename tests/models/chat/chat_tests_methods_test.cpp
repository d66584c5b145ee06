// Tests (is ...), string and dict methods, global functions, the variables a render is given.
// Each case's expected text is what @huggingface/jinja 0.5.11 (the Jinja of transformers.js)
// renders for the same template and variables, the variables' keys in byte order as
// nlohmann::json holds them; a case with an error is one the reference raises for.
#include <gtest/gtest.h>

#include "tests/models/chat/render_case.h"

namespace strata::models::chat {
namespace {

const RenderCase kCases[] = {
    {"value_tests",
     R"jinja({{ 3 is odd }} {{ 4 is even }} {{ 4 is not odd }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ missing is defined }} {{ missing is undefined }} {{ none is defined }} {{ x is defined and x is not none }} {{ range is callable }})jinja",
     R"jinja({"extra": {"x": 0}})jinja",
     R"jinja(true true true true false true true true false true true true true)jinja", nullptr},
    {"namespace_is_not_mapping",
     R"jinja({% set ns = namespace(a=1) %}{{ ns is mapping }} {{ ns is defined }} {{ (1, 2) is iterable }})jinja",
     R"jinja({})jinja", R"jinja(false true false)jinja", nullptr},
    {"strip_methods_ignore_their_argument",
     R"jinja([{{ s.strip() }}] [{{ s.strip('\n') }}] [{{ s.lstrip('\n') }}] [{{ s.rstrip('\n') }}] [{{ 'xxhixx'.strip('x') }}])jinja",
     R"jinja({"extra": {"s": "\n  text  \n"}})jinja",
     "[text] [text] [text  \n] [\n  text] [xxhixx]", nullptr},
    {"string_methods",
     R"jinja({{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ s.capitalize() }} {{ s.startswith('He') }} {{ s.endswith(('x', 'ld')) }} {{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }})jinja",
     R"jinja({"extra": {"s": "Hello world"}})jinja",
     R"jinja(HELLO WORLD hello world Hello World Hello world true true HeLLo worLd HeLlo world)jinja",
     nullptr},
    {"split",
     R"jinja({{ '  a  b c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a b  c'.split(none, 1) }} {{ '<think>x</think>\n\nanswer'.split('</think>')[-1] }} {{ 'a,b,c'.split(',', -2) }})jinja",
     R"jinja({})jinja",
     "[\"a\", \"b\", \"c\"] [\"a\", \"b\", \"\", \"c\"] [\"a\", \"b,c\"] [\"a\", \"b  c\"] "
     "\n\nanswer [\"a\", \"b,c\"]",
     nullptr},
    {"dict_methods",
     R"jinja({{ d.get('a') }} [{{ d.get('z') }}] {{ d.get('z', 'dflt') }} {{ d.keys() }} {{ d.values() }} {{ d.items() }} {{ d.dictsort() }})jinja",
     R"jinja({"extra": {"d": {"a": 1, "b": 2}}})jinja",
     R"jinja(1 [] dflt ["a", "b"] [1, 2] [["a", 1], ["b", 2]] [["a", 1], ["b", 2]])jinja", nullptr},
    {"global_functions",
     R"jinja({{ range(3) }} {{ range(1, 4) }} {{ range(5, 0, -2) }} {{ range(0) }} {% for i in range(2) %}{{ i }}{% endfor %})jinja",
     R"jinja({})jinja", R"jinja([0, 1, 2] [1, 2, 3] [5, 3, 1] [] 01)jinja", nullptr},
    {"raise_exception_message",
     R"jinja({% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with a user message, got ' + messages[0].role) }}{% endif %})jinja",
     R"jinja({"messages": [{"content": "Be kind.", "role": "system"}, {"content": "Hi", "role": "user"}, {"content": "Hello!", "role": "assistant"}]})jinja",
     nullptr, "Conversations must start with a user message, got system"},
    {"tools_none_and_extra",
     R"jinja({{ tools is defined }} {{ tools is none }} {{ documents is none }} {{ enable_thinking }} [{{ bos_token }}] {{ add_generation_prompt }})jinja",
     R"jinja({"add_generation_prompt": true, "bos_token": "", "extra": {"enable_thinking": false}})jinja",
     R"jinja(true true true false [] true)jinja", nullptr},
};

TEST(ChatTemplateTestsAndMethods, RendersAsTheReference) {
  for (const RenderCase& c : kCases)
    expect_renders(c);
}

}  // namespace
}  // namespace strata::models::chat
