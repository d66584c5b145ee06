#include "models/chat/jinja_parser.h"

#include <algorithm>

#include "base/error.h"
#include "models/chat/jinja_parser_state.h"

namespace strata::models::chat::jinja {

namespace {

constexpr const char* kSyntaxFix =
    "fix the template's syntax there: strata reads templates as transformers.js "
    "(@huggingface/jinja) does, with trim_blocks and lstrip_blocks on";

const char* token_name(TokenType type) {
  static constexpr const char* kNames[] = {
      "text", "a number",     "a string", "a name",   "'='", "'('",         "')'",
      "'{%'", "'%}'",         "'{{'",     "'}}'",     "'['", "']'",         "'{'",
      "'}'",  "','",          "'.'",      "':'",      "'|'", "an operator", "an operator",
      "'**'", "a comparison", "a sign",   "a comment"};
  return kNames[static_cast<int>(type)];
}

// What to say of a statement strata does not render.
std::string unknown_statement(const std::string& name) {
  if (name == "call" || name == "filter") {
    return "{% " + name +
           " %} blocks are not supported (no chat template this was built for "
           "uses one)";
  }
  if (name == "elif" || name == "else" || name.starts_with("end")) {
    return "{% " + name + " %} has no statement open that it belongs to";
  }
  return "the statement {% " + name +
         " %} is not supported (strata renders set, if, for, macro, "
         "break and continue, as transformers.js does)";
}

}  // namespace

Parser::Parser(std::vector<Token> tokens, const std::string& origin)
    : tokens_(std::move(tokens)), origin_(origin) {
  static constexpr const char* kWellKnown[kSlotCount] = {"loop",
                                                         "messages",
                                                         "tools",
                                                         "documents",
                                                         "add_generation_prompt",
                                                         "bos_token",
                                                         "eos_token",
                                                         "kwargs",
                                                         "varargs",
                                                         "namespace",
                                                         "raise_exception",
                                                         "range",
                                                         "strftime_now",
                                                         "true",
                                                         "false",
                                                         "none",
                                                         "True",
                                                         "False",
                                                         "None"};
  for (const char* name : kWellKnown)
    template_.names.emplace_back(name);
}

Template Parser::run() {
  while (current_ < tokens_.size()) {
    if (auto statement = parse_any()) template_.body.push_back(std::move(statement));
  }
  check_calls();
  return std::move(template_);
}

std::unique_ptr<Stmt> Parser::parse_any() {
  const Token& token = tokens_[current_];
  switch (token.type) {
    case TokenType::comment:
      ++current_;
      return nullptr;
    case TokenType::text: {
      auto text = std::make_unique<Stmt>();
      text->kind = StmtKind::text;
      text->line = token.line;
      text->text = token.value;
      ++current_;
      return text;
    }
    case TokenType::open_statement:
      return parse_statement();
    case TokenType::open_expression: {
      auto output = std::make_unique<Stmt>();
      output->kind = StmtKind::output;
      output->line = token.line;
      ++current_;
      output->expr = parse_expression();
      expect(TokenType::close_expression, "'}}' to close the expression");
      return output;
    }
    default:
      syntax(std::string("unexpected ") + token_name(token.type));
  }
}

std::unique_ptr<Stmt> Parser::parse_statement() {
  const int at = line();
  expect(TokenType::open_statement, "'{%'");
  if (!is(TokenType::identifier)) syntax("a statement name must follow '{%'");
  const std::string name = tokens_[current_++].value;
  if (name == "set") return parse_set(at);
  if (name == "if") {
    auto statement = parse_if(at);
    expect_end("endif", "if", at);
    return statement;
  }
  if (name == "for") return parse_for(at);
  if (name == "macro") return parse_macro(at);
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail(at, "{% " + name + " %} is outside a for loop", kSyntaxFix);
    expect(TokenType::close_statement, "'%}'");
    auto statement = std::make_unique<Stmt>();
    statement->kind = name == "break" ? StmtKind::break_ : StmtKind::continue_;
    statement->line = at;
    return statement;
  }
  fail(at, unknown_statement(name), kSupportedFix);
}

std::unique_ptr<Stmt> Parser::parse_set(int at) {
  auto statement = std::make_unique<Stmt>();
  statement->line = at;
  ExprPtr left = parse_expression_sequence(false);
  if (is(TokenType::equals)) {
    ++current_;
    statement->kind = StmtKind::set;
    statement->expr = parse_expression_sequence(false);
  } else {
    statement->kind = StmtKind::set_block;
    expect(TokenType::close_statement, "'%}' or '=' after the name to set");
    statement->body = parse_body_until({"endset"}, "set", at);
    expect(TokenType::open_statement, "'{%'");
    expect_identifier("endset");
  }
  expect(TokenType::close_statement, "'%}'");
  statement->target = make_target(std::move(left), false);
  return statement;
}

std::unique_ptr<Stmt> Parser::parse_if(int at) {
  auto statement = std::make_unique<Stmt>();
  statement->kind = StmtKind::if_;
  statement->line = at;
  statement->expr = parse_expression();
  expect(TokenType::close_statement, "'%}' after the condition");
  statement->body = parse_body_until({"elif", "else", "endif"}, "if", at);
  if (is_statement({"elif"})) {
    const int elif_line = line();
    current_ += 2;
    statement->alternate.push_back(parse_if(elif_line));
  } else if (is_statement({"else"})) {
    current_ += 2;
    expect(TokenType::close_statement, "'%}' after else");
    statement->alternate = parse_body_until({"endif"}, "if", at);
  }
  return statement;
}

std::unique_ptr<Stmt> Parser::parse_for(int at) {
  auto statement = std::make_unique<Stmt>();
  statement->kind = StmtKind::for_;
  statement->line = at;
  ExprPtr variables = parse_expression_sequence(true);
  statement->target = make_target(std::move(variables), true);
  if (!is_identifier("in")) syntax("expected 'in' after the loop variable");
  ++current_;
  ExprPtr iterable = parse_expression();
  if (iterable->kind == ExprKind::select) {
    // `for x in xs if cond`: the condition filters the items.
    statement->expr = std::move(iterable->operands[0]);
    statement->condition = std::move(iterable->operands[1]);
  } else {
    statement->expr = std::move(iterable);
  }
  if (is_identifier("recursive")) fail(at, "recursive for loops are not supported", kSupportedFix);
  expect(TokenType::close_statement, "'%}' after the loop's iterable");
  ++loop_depth_;
  statement->body = parse_body_until({"endfor", "else"}, "for", at);
  --loop_depth_;
  if (is_statement({"else"})) {
    current_ += 2;
    expect(TokenType::close_statement, "'%}' after else");
    statement->alternate = parse_body_until({"endfor"}, "for", at);
  }
  expect_end("endfor", "for", at);
  return statement;
}

std::unique_ptr<Stmt> Parser::parse_macro(int at) {
  auto statement = std::make_unique<Stmt>();
  statement->kind = StmtKind::macro;
  statement->line = at;
  if (!is(TokenType::identifier)) syntax("expected the macro's name");
  statement->name = tokens_[current_++].value;
  statement->slot = intern(statement->name);
  bound_.push_back(statement->name);
  for (Argument& argument : parse_arguments(true)) {
    Parameter parameter;
    parameter.name = argument.keyword.empty() ? argument.value->name : argument.keyword;
    parameter.slot = intern(parameter.name);
    if (!argument.keyword.empty()) parameter.default_value = std::move(argument.value);
    bound_.push_back(parameter.name);
    statement->parameters.push_back(std::move(parameter));
  }
  expect(TokenType::close_statement, "'%}' after the macro's parameters");
  const int outer_loops = loop_depth_;
  loop_depth_ = 0;  // A break in a macro's body needs a loop of its own.
  macros_.push_back(statement.get());
  statement->body = parse_body_until({"endmacro"}, "macro", at);
  macros_.pop_back();
  loop_depth_ = outer_loops;
  expect_end("endmacro", "macro", at);
  return statement;
}

Body Parser::parse_body_until(std::initializer_list<std::string_view> ends, std::string_view opener,
                              int at) {
  Body body;
  while (!is_statement(ends)) {
    if (current_ >= tokens_.size()) {
      fail(at,
           "the {% " + std::string(opener) + " %} opened here is never closed with {% " +
               std::string(*(ends.end() - 1)) + " %}",
           kSyntaxFix);
    }
    if (auto statement = parse_any()) body.push_back(std::move(statement));
  }
  return body;
}

void Parser::expect_end(std::string_view name, std::string_view opener, int at) {
  if (!is_statement({name})) {
    fail(at,
         "the {% " + std::string(opener) + " %} opened here is never closed with {% " +
             std::string(name) + " %}",
         kSyntaxFix);
  }
  current_ += 2;
  expect(TokenType::close_statement, "'%}'");
}

Target Parser::make_target(ExprPtr expr, bool for_loop) {
  Target target;
  const auto variable_slot = [&](const Expr& e) {
    if (e.kind != ExprKind::variable) {
      fail(e.line,
           for_loop ? "a for loop's variables must be names"
                    : "set assigns to a name, names or namespace.attribute",
           kSyntaxFix);
    }
    bound_.push_back(e.name);
    return e.slot;
  };
  if (expr->kind == ExprKind::tuple) {
    target.kind = Target::Kind::tuple;
    for (const ExprPtr& item : expr->operands)
      target.slots.push_back(variable_slot(*item));
  } else if (expr->kind == ExprKind::member && !for_loop && expr->dotted &&
             expr->operands[1]->literal.kind == Kind::string) {
    target.kind = Target::Kind::attribute;
    target.attribute = expr->operands[1]->literal.str();
    target.object = std::move(expr->operands[0]);
  } else {
    target.slots.push_back(variable_slot(*expr));
  }
  return target;
}

void Parser::check_calls() const {
  for (const auto& [name, at] : called_names_) {
    if (find_function(name)) continue;
    if (std::find(bound_.begin(), bound_.end(), name) != bound_.end()) continue;
    fail(at,
         "'" + name +
             "' is not a function strata knows (range, namespace, raise_exception, "
             "strftime_now, or a macro of the template)",
         kSupportedFix);
  }
}

bool Parser::is(TokenType type, std::size_t ahead) const {
  return current_ + ahead < tokens_.size() && tokens_[current_ + ahead].type == type;
}

bool Parser::is_identifier(std::string_view name, std::size_t ahead) const {
  return is(TokenType::identifier, ahead) && tokens_[current_ + ahead].value == name;
}

bool Parser::is_statement(std::initializer_list<std::string_view> names) const {
  if (!is(TokenType::open_statement) || !is(TokenType::identifier, 1)) return false;
  const std::string& name = tokens_[current_ + 1].value;
  return std::find(names.begin(), names.end(), name) != names.end();
}

const Token& Parser::expect(TokenType type, std::string_view what) {
  if (!is(type)) syntax("expected " + std::string(what) + ", found " + describe_current());
  return tokens_[current_++];
}

void Parser::expect_identifier(std::string_view name) {
  if (!is_identifier(name))
    syntax("expected '" + std::string(name) + "', found " + describe_current());
  ++current_;
}

int Parser::line() const {
  if (tokens_.empty()) return 1;
  return tokens_[std::min(current_, tokens_.size() - 1)].line;
}

std::string Parser::describe_current() const {
  if (current_ >= tokens_.size()) return "the end of the template";
  const Token& token = tokens_[current_];
  if (token.type == TokenType::identifier) return "'" + token.value + "'";
  return token_name(token.type);
}

int Parser::intern(const std::string& name) {
  const auto found = std::find(template_.names.begin(), template_.names.end(), name);
  if (found != template_.names.end()) return static_cast<int>(found - template_.names.begin());
  template_.names.push_back(name);
  return static_cast<int>(template_.names.size() - 1);
}

void Parser::fail(int at, const std::string& cause, const std::string& fix) const {
  throw UserError(origin_ + ", line " + std::to_string(at) + ": " + cause, fix, 2);
}

void Parser::syntax(const std::string& cause) const {
  fail(line(), cause, kSyntaxFix);
}

Template parse_template(std::string_view source, const std::string& origin) {
  std::vector<Token> tokens;
  try {
    tokens = tokenize(source);
  } catch (const LexError& error) {
    throw UserError(origin + ", line " + std::to_string(error.line) + ": " + error.message,
                    kSyntaxFix, 2);
  }
  return Parser(std::move(tokens), origin).run();
}

}  // namespace strata::models::chat::jinja
