// What strata renders where @huggingface/jinja raises for every input: the filters count, d,
// escape and e, select and reject, default without parentheses, and the test `float`. These
// follow Python's Jinja (what transformers renders with); docs/chat.md lists them.
#include <gtest/gtest.h>

#include "tests/models/chat/render_case.h"

namespace strata::models::chat {
namespace {

TEST(ChatTemplateExtensions, CountIsLength) {
  EXPECT_EQ(render("{{ [1, 2] | count }} {{ 'abé' | count }} {{ {'a': 1} | count }}"), "2 3 1");
}

TEST(ChatTemplateExtensions, DefaultWithoutParenthesesAndItsAliasD) {
  EXPECT_EQ(render("[{{ missing | default }}] [{{ 'v' | default }}] [{{ missing | d('x') }}] "
                   "[{{ none | d('x') }}] [{{ '' | d('x', true) }}]"),
            "[] [v] [x] [] [x]");
}

TEST(ChatTemplateExtensions, SelectAndRejectByTest) {
  EXPECT_EQ(
      render(
          "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 0, 'a', ''] | select | list }} "
          "{{ [1, 2, 3] | reject('even') | list }} {{ [1, 2, 2] | select('equalto', 2) | list }}"),
      "[1, 3] [1, \"a\"] [1, 3] [2, 2]");
}

TEST(ChatTemplateExtensions, EscapeAsMarkupSafe) {
  EXPECT_EQ(render(R"({{ '<a href="x">&'"'"'</a>' | escape }} {{ '<' | e }} {{ '<b>' | safe }})"),
            "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt; &lt; <b>");
}

TEST(ChatTemplateExtensions, FloatTest) {
  EXPECT_EQ(render("{{ 1.5 is float }} {{ 1 is float }} {{ 1.0 is float }} {{ 'x' is float }}"),
            "true false true false");
}

}  // namespace
}  // namespace strata::models::chat
