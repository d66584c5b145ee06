// What strata refuses: at parse time, any construct outside what it renders, naming the origin,
// the line and the construct; at render time, errors of evaluation naming the origin and line,
// and raise_exception with its own message.
#include <gtest/gtest.h>

#include <regex>
#include <thread>
#include <vector>

#include "tests/models/chat/render_case.h"

namespace strata::models::chat {
namespace {

// The parse error's message, or "" when `source` parses.
std::string parse_error(std::string_view source) {
  try {
    ChatTemplate::parse(source, "Model/tokenizer_config.json's chat_template");
  } catch (const UserError& error) {
    EXPECT_FALSE(error.fix().empty());
    return error.what();
  }
  return "";
}

void expect_refused(std::string_view source, const std::string& line,
                    const std::string& construct) {
  SCOPED_TRACE(std::string(source));
  const std::string message = parse_error(source);
  EXPECT_NE(message.find("Model/tokenizer_config.json's chat_template, line " + line + ":"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(construct), std::string::npos) << message;
}

TEST(ChatTemplateRefusals, UnknownStatementsAndBlocks) {
  expect_refused("a\n{% include 'other.jinja' %}", "2", "include");
  expect_refused("{% call m() %}x{% endcall %}", "1", "call");
  expect_refused("{% filter upper %}x{% endfilter %}", "1", "filter");
  expect_refused("{% endif %}", "1", "endif");
  expect_refused("{% for x in xs recursive %}{% endfor %}", "1", "recursive");
  expect_refused("{% break %}", "1", "outside a for loop");
  expect_refused("{% for x in xs %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}", "1",
                 "outside a for loop");
}

TEST(ChatTemplateRefusals, UnknownFiltersTestsMethodsAndFunctions) {
  expect_refused("{{ x }}\n\n{{ x | wordcount }}", "3", "'wordcount'");
  expect_refused("{{ x is divisibleby }}", "1", "'divisibleby'");
  expect_refused("{{ x is defined(1) }}", "1", "argument");
  expect_refused("{{ x is equalto }}", "1", "equalto");
  expect_refused("{{ messages.append(1) }}", "1", "'append()'");
  expect_refused("{{ 'a {}'.format(1) }}", "1", "'format()'");
  expect_refused("{{ dict(a=1) }}", "1", "'dict'");
  expect_refused("{{ lipsum() }}", "1", "'lipsum'");
  expect_refused("{{ xs | map('upper') }}", "1", "attribute=");
  expect_refused("{{ xs | selectattr(name) }}", "1", "selectattr");
  expect_refused("{{ xs | selectattr('a', 'sameas', 'x') }}", "1", "'sameas'");
  expect_refused("{{ f(*args) }}", "1", "unpacking");
}

TEST(ChatTemplateRefusals, AMacroOrAssignedNameMayBeCalled) {
  EXPECT_EQ(parse_error("{{ m() }}{% macro m() %}{% endmacro %}"), "");
  EXPECT_EQ(parse_error("{% set f = range %}{{ f(2) }}"), "");
}

TEST(ChatTemplateRefusals, SyntaxErrorsNameTheOriginalLine) {
  // trim_blocks removes newlines before the lexer runs; the line is still the author's.
  expect_refused("{% if true %}\n{% endif %}\n{{ x | nope }}", "3", "'nope'");
  expect_refused("{% if x %}\na", "1", "never closed with {% endif %}");
  expect_refused("{{ x $ y }}", "1", "Unexpected character: $");
  expect_refused("{{ '\\q' }}", "1", "Unexpected escaped character");
  expect_refused("{{ 'open }}", "1", "Unexpected end of input");
  expect_refused("{% set ns['a'] = 1 %}", "1", "set assigns");
  expect_refused("{{ f(a=1, 2) }}", "1", "positional argument follows");
  expect_refused("{% macro m(a=1, b) %}{% endmacro %}", "1", "without a default");
}

std::string render_error(std::string_view source, std::string_view variables = "{}") {
  try {
    render(source, variables);
  } catch (const TemplateError& error) {
    return error.what();
  }
  return "";
}

TEST(ChatTemplateRefusals, EvaluationErrorsNameOriginAndLine) {
  EXPECT_EQ(render_error("a\nb\n{{ none + 1 }}"),
            "test template, line 3: Cannot perform operation on null values");
  EXPECT_EQ(render_error("{% for c in 'abc' %}{% endfor %}"),
            "test template, line 1: Expected iterable or object type in for loop: got StringValue");
  EXPECT_EQ(render_error("{{ messages() }}{% set messages = 1 %}"),
            "test template, line 1: Cannot call something that is not a function: got ArrayValue");
  EXPECT_EQ(render_error("{% set x = 1 %}{% set x.a = 2 %}"),
            "test template, line 1: cannot assign attribute on non-namespace object");
  EXPECT_EQ(render_error("{{ (1, 2) }}"),
            "test template, line 1: Cannot convert to JSON: TupleValue");
  EXPECT_EQ(render_error("{{ 'x' | tojson(sort_keys=true) }}"),
            "test template, line 1: tojson(sort_keys=true) is not supported");
  EXPECT_EQ(render_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
            "test template, line 1: macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(render_error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"),
            "test template, line 1: macro calls nest deeper than 200");
}

TEST(ChatTemplateRefusals, RaiseExceptionCarriesItsMessage) {
  try {
    render("{% if messages | length == 0 %}\n{{ raise_exception('No messages!') }}{% endif %}");
    FAIL() << "raise_exception did not throw";
  } catch (const TemplateError& error) {
    EXPECT_STREQ(error.what(), "No messages!");
    EXPECT_NE(error.fix().find("test template raised this at line 2"), std::string::npos);
  }
}

TEST(ChatTemplateRefusals, ExtraVariablesMustNotReplaceGlobals) {
  EXPECT_THROW(render("{{ range }}", R"({"extra": {"range": 1}})"), TemplateError);
  EXPECT_THROW(render("x", R"({"extra": [1]})"), TemplateError);
  // Extra variables replace the others, as transformers.js's object spread does.
  EXPECT_EQ(render("{{ messages }}", R"({"extra": {"messages": "replaced"}})"), "replaced");
}

TEST(ChatTemplateRender, StrftimeNowFormatsTheLocalTime) {
  const std::string now = render("{{ strftime_now('%Y-%m-%d %H:%M %b|%%|%S') }}");
  EXPECT_TRUE(
      std::regex_match(now, std::regex(R"(\d{4}-\d{2}-\d{2} \d{2}:\d{2} [A-Z][a-z]{2}\|%\|%S)")))
      << now;
}

TEST(ChatTemplateRender, RendersFromManyThreadsAtOnce) {
  const ChatTemplate chat = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.content | upper }}{% endfor %}{{ ns.n }}",
      "threads");
  const ChatInputs inputs = inputs_of(R"({"messages": [{"content": "a"}, {"content": "b"}]})");
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(4);
  for (std::size_t t = 0; t < outputs.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i)
        outputs[t] = chat.render(inputs);
    });
  }
  for (auto& thread : threads)
    thread.join();
  for (const std::string& output : outputs)
    EXPECT_EQ(output, "AB2");
}

TEST(ChatTemplateRender, MovesAndKeepsItsOrigin) {
  ChatTemplate first = ChatTemplate::parse("{{ 1 + 1 }}", "first");
  ChatTemplate second = std::move(first);
  EXPECT_EQ(second.origin(), "first");
  EXPECT_EQ(second.render({}), "2");
}

}  // namespace
}  // namespace strata::models::chat
