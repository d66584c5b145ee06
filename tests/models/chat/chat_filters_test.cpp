// Filters, with and without parentheses.
// Each case's expected text is what @huggingface/jinja 0.5.11 (the Jinja of transformers.js)
// renders for the same template and variables, the variables' keys in byte order as
// nlohmann::json holds them; a case with an error is one the reference raises for.
#include <gtest/gtest.h>

#include "tests/models/chat/render_case.h"

namespace strata::models::chat {
namespace {

const RenderCase kCases[] = {
    {"tojson",
     "{{ d | tojson }}|{{ 'q\"\\\\\n\\u0001é' | tojson }}|{{ [1, 2.5, none, true] | tojson }}|{{ "
     "missing | tojson }}|{{ 2.0 | tojson }}",
     R"jinja({"extra": {"d": {"a": "x", "b": [1, {"c": null}]}}})jinja",
     R"jinja({"a": "x", "b": [1, {"c": null}]}|"q\"\\\n\u0001é"|[1, 2.5, null, true]|null|2)jinja",
     nullptr},
    {"tojson_options",
     R"jinja({{ d | tojson(indent=2) }}|{{ d | tojson(indent=0) }}|{{ [] | tojson(indent=2) }}|{{ 'é😀' | tojson(ensure_ascii=true) }}|{{ d | tojson(separators=(',', ':')) }})jinja",
     R"jinja({"extra": {"d": {"e": {}, "k": [1, {}]}}})jinja",
     "{\n  \"e\": {},\n  \"k\": [\n    1,\n    {}\n  ]\n}|{\"e\": {}, \"k\": [1, "
     "{}]}|[]|\"\\u00e9\\ud83d\\ude00\"|{\"e\":{},\"k\":[1,{}]}",
     nullptr},
    {"string_case_filters",
     R"jinja({{ s | upper }}|{{ s | lower }}|{{ s | title }}|{{ s | capitalize }}|{{ 'straße ﬁ' | upper }}|{{ 'ΣΑΣ' | lower }})jinja",
     R"jinja({"extra": {"s": "hELLO wORLD don't é-x"}})jinja",
     R"jinja(HELLO WORLD DON'T É-X|hello world don't é-x|HELLO WORLD Don'T é-X|HELLO wORLD don't é-x|STRASSE FI|σας)jinja",
     nullptr},
    {"replace",
     R"jinja({{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'ab' | replace('', '-') }} {{ 'aXa' | replace('a', 'b', count=1) }})jinja",
     R"jinja({})jinja", R"jinja(bbb bba -a-b- bXa)jinja", nullptr},
    {"join",
     R"jinja({{ [1, 'a', none, 2.0] | join }} {{ ['x', 'y'] | join(', ') }} {{ 'abc' | join('-') }} {{ 'abc' | join }} {{ [[1, 2], 3] | join(';') }})jinja",
     R"jinja({})jinja", R"jinja(1a2 x, y a-b-c abc 1,2;3)jinja", nullptr},
    {"first_last_list_reverse",
     R"jinja({{ l | first }} {{ l | last }} {{ l | list }} {{ l | reverse }} {{ 'abc'[::-1] }})jinja",
     R"jinja({"extra": {"l": [3, 1, 2]}})jinja", R"jinja(3 2 [3, 1, 2] [2, 1, 3] cba)jinja",
     nullptr},
    {"string_and_numbers",
     R"jinja({{ 5 | string }} {{ 2.0 | string }} {{ true | string }} {{ [1, 'a'] | string }} {{ '42abc' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ ' 2.5e1z' | float }} {{ 3.7 | int }} {{ 3 | float }} {{ true | int }} {{ -3 | abs }} {{ -2.5 | abs }} {{ 3.7 | int(0) }})jinja",
     R"jinja({})jinja", R"jinja(5 2.0 true [1, "a"] 42 0 7 25.0 3 3.0 1 3 2.5 3.7)jinja", nullptr},
    {"items_keys_dictsort",
     R"jinja({{ d | items }} {{ d | dictsort }} {{ d | dictsort(reverse=true) }} {{ d | dictsort(by='value') }})jinja",
     R"jinja({"extra": {"d": {"C": 2, "a": 3, "b": 1}}})jinja",
     R"jinja([["C", 2], ["a", 3], ["b", 1]] [["a", 3], ["b", 1], ["C", 2]] [["C", 2], ["b", 1], ["a", 3]] [["b", 1], ["C", 2], ["a", 3]])jinja",
     nullptr},
    {"map_select_reject",
     R"jinja({{ messages | map(attribute='role') | join(',') }} {{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ messages | rejectattr('role', 'equalto', 'user') | length }} {{ tools | selectattr('function') | length }} {{ messages | map(attribute='missing', default='-') | join }})jinja",
     R"jinja({"messages": [{"content": "Be kind.", "role": "system"}, {"content": "Hi", "role": "user"}, {"content": "Hello!", "role": "assistant"}], "tools": [{"function": {"name": "f"}, "type": "function"}, {"type": "x"}]})jinja",
     R"jinja(system,user,assistant ["Hi"] 2 1 ---)jinja", nullptr},
    {"unique_sort",
     R"jinja({{ [3, 1, 3, 2, 1] | unique }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ [3, 1, 2] | sort(reverse=true) }} {{ messages | sort(attribute='role') | map(attribute='role') | join(',') }})jinja",
     R"jinja({"messages": [{"content": "Be kind.", "role": "system"}, {"content": "Hi", "role": "user"}, {"content": "Hello!", "role": "assistant"}]})jinja",
     R"jinja([3, 1, 2] ["A", "b", "c"] ["A", "b", "c"] [3, 2, 1] assistant,system,user)jinja",
     nullptr},
    {"indent",
     R"jinja({{ s | indent }}|{{ s | indent(2, true) }}|{{ s | indent(width=1, blank=true) }})jinja",
     R"jinja({"extra": {"s": "a\n\nb\n c"}})jinja",
     "a\n\n    b\n     c|  a\n\n  b\n   c|a\n \n b\n  c", nullptr},
};

TEST(ChatTemplateFilters, RendersAsTheReference) {
  for (const RenderCase& c : kCases)
    expect_renders(c);
}

}  // namespace
}  // namespace strata::models::chat
