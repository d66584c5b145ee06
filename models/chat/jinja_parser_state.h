#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/chat/jinja_ast.h"
#include "models/chat/jinja_lexer.h"

// The parser's state, shared by its two files: jinja_parser.cpp (statements) and
// jinja_expression_parser.cpp (expressions, by precedence as @huggingface/jinja's parser has
// them).
namespace strata::models::chat::jinja {

// The fix of a construct outside what strata renders.
inline constexpr const char* kSupportedFix =
    "strata renders the part of Jinja that transformers.js (@huggingface/jinja) renders, listed "
    "in docs/chat.md under 'The chat template'; rewrite this part of the template with what is "
    "listed there";

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin);

  Template run();

 private:
  // Statements.
  std::unique_ptr<Stmt> parse_any();
  std::unique_ptr<Stmt> parse_statement();
  std::unique_ptr<Stmt> parse_set(int line);
  std::unique_ptr<Stmt> parse_if(int line);
  std::unique_ptr<Stmt> parse_for(int line);
  std::unique_ptr<Stmt> parse_macro(int line);
  Body parse_body_until(std::initializer_list<std::string_view> ends, std::string_view opener,
                        int line);
  void expect_end(std::string_view name, std::string_view opener, int line);
  Target make_target(ExprPtr expr, bool for_loop);
  void check_calls() const;

  // Expressions, lowest precedence first.
  ExprPtr parse_expression();
  ExprPtr parse_expression_sequence(bool primary);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_comparison();
  ExprPtr parse_additive();
  ExprPtr parse_multiplicative();
  ExprPtr parse_power();
  ExprPtr parse_test();
  ExprPtr parse_filter();
  ExprPtr parse_unary_sign();
  ExprPtr parse_call_member();
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_member(ExprPtr object);
  ExprPtr parse_subscript(ExprPtr object, int line);
  ExprPtr parse_primary();
  std::vector<Argument> parse_arguments(bool parameters);
  void check_filter(const Expr& filter) const;

  // Tokens.
  bool is(TokenType type, std::size_t ahead = 0) const;
  bool is_identifier(std::string_view name, std::size_t ahead = 0) const;
  bool is_statement(std::initializer_list<std::string_view> names) const;
  const Token& expect(TokenType type, std::string_view what);
  void expect_identifier(std::string_view name);
  int line() const;
  std::string describe_current() const;
  int intern(const std::string& name);

  // A UserError naming the origin and line, the cause and the fix.
  [[noreturn]] void fail(int line, const std::string& cause, const std::string& fix) const;
  [[noreturn]] void syntax(const std::string& cause) const;

  std::vector<Token> tokens_;
  const std::string& origin_;
  std::size_t current_ = 0;
  Template template_;
  int loop_depth_ = 0;              // for break and continue
  std::vector<Stmt*> macros_;       // the macros being parsed, innermost last
  std::vector<std::string> bound_;  // names the template assigns
  std::vector<std::pair<std::string, int>> called_names_;  // f(...) with f a bare name
};

}  // namespace strata::models::chat::jinja
