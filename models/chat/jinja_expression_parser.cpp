// Expressions, by precedence from the lowest, as @huggingface/jinja's parser reads them: a
// conditional, or, and, not, comparisons and `in`, + - ~, * / // %, **, `is` tests, `|` filters,
// unary signs, calls and members, primaries. (Unlike Python's Jinja, a filter binds tighter than
// a unary sign and a test binds tighter than arithmetic: the reference decides.)
#include <cstdlib>

#include "models/chat/jinja_parser_state.h"

namespace strata::models::chat::jinja {

namespace {

ExprPtr node(ExprKind kind, int line) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->line = line;
  return expr;
}

ExprPtr binary(Operator op, ExprPtr left, ExprPtr right, int line) {
  auto expr = node(ExprKind::binary, line);
  expr->op = op;
  expr->operands.push_back(std::move(left));
  expr->operands.push_back(std::move(right));
  return expr;
}

Operator operator_of(const std::string& symbol) {
  static const std::pair<const char*, Operator> kOperators[] = {
      {"+", Operator::add},         {"-", Operator::subtract},      {"~", Operator::concat},
      {"*", Operator::multiply},    {"/", Operator::divide},        {"//", Operator::floor_divide},
      {"%", Operator::modulo},      {"**", Operator::power},        {"==", Operator::equal},
      {"!=", Operator::not_equal},  {"<", Operator::less},          {">", Operator::greater},
      {"<=", Operator::less_equal}, {">=", Operator::greater_equal}};
  for (const auto& [name, op] : kOperators) {
    if (symbol == name) return op;
  }
  return Operator::add;  // unreachable: the lexer makes no other operator
}

bool is_string_literal(const Argument& argument) {
  return argument.keyword.empty() && argument.value->kind == ExprKind::literal &&
         argument.value->literal.kind == Kind::string;
}

}  // namespace

ExprPtr Parser::parse_expression() {
  const int at = line();
  ExprPtr value = parse_or();
  if (!is_identifier("if")) return value;
  ++current_;
  ExprPtr condition = parse_or();
  if (is_identifier("else")) {
    ++current_;
    auto ternary = node(ExprKind::ternary, at);
    ternary->operands.push_back(std::move(condition));
    ternary->operands.push_back(std::move(value));
    ternary->operands.push_back(parse_expression());
    return ternary;
  }
  auto select = node(ExprKind::select, at);
  select->operands.push_back(std::move(value));
  select->operands.push_back(std::move(condition));
  return select;
}

ExprPtr Parser::parse_expression_sequence(bool primary) {
  const int at = line();
  ExprPtr first = primary ? parse_primary() : parse_expression();
  if (!is(TokenType::comma)) return first;
  auto tuple = node(ExprKind::tuple, at);
  tuple->operands.push_back(std::move(first));
  while (is(TokenType::comma)) {
    ++current_;
    tuple->operands.push_back(primary ? parse_primary() : parse_expression());
  }
  return tuple;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_identifier("or")) {
    const int at = tokens_[current_++].line;
    left = binary(Operator::logical_or, std::move(left), parse_and(), at);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_identifier("and")) {
    const int at = tokens_[current_++].line;
    left = binary(Operator::logical_and, std::move(left), parse_not(), at);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (!is_identifier("not")) return parse_comparison();
  auto negation = node(ExprKind::unary, tokens_[current_++].line);
  negation->op = Operator::logical_not;
  negation->operands.push_back(parse_not());
  return negation;
}

ExprPtr Parser::parse_comparison() {
  ExprPtr left = parse_additive();
  while (true) {
    const int at = line();
    Operator op{};
    if (is_identifier("not") && is_identifier("in", 1)) {
      op = Operator::not_in;
      current_ += 2;
    } else if (is_identifier("in")) {
      op = Operator::in;
      ++current_;
    } else if (is(TokenType::comparison_operator)) {
      op = operator_of(tokens_[current_++].value);
    } else {
      return left;
    }
    left = binary(op, std::move(left), parse_additive(), at);
  }
}

ExprPtr Parser::parse_additive() {
  ExprPtr left = parse_multiplicative();
  while (is(TokenType::additive_operator)) {
    const Token& token = tokens_[current_++];
    left = binary(operator_of(token.value), std::move(left), parse_multiplicative(), token.line);
  }
  return left;
}

ExprPtr Parser::parse_multiplicative() {
  ExprPtr left = parse_power();
  while (is(TokenType::multiplicative_operator)) {
    const Token& token = tokens_[current_++];
    left = binary(operator_of(token.value), std::move(left), parse_power(), token.line);
  }
  return left;
}

ExprPtr Parser::parse_power() {
  ExprPtr left = parse_test();
  while (is(TokenType::exponentiation_operator)) {
    const int at = tokens_[current_++].line;
    left = binary(Operator::power, std::move(left), parse_test(), at);
  }
  return left;
}

ExprPtr Parser::parse_test() {
  ExprPtr operand = parse_filter();
  while (is_identifier("is")) {
    const int at = tokens_[current_++].line;
    const bool negated = is_identifier("not");
    if (negated) ++current_;
    if (!is(TokenType::identifier)) syntax("expected a test's name after 'is'");
    const std::string name = tokens_[current_++].value;
    const auto test = find_test(name);
    if (!test) fail(at, "the test '" + name + "' is not supported", kSupportedFix);
    if (*test == Test::equalto || *test == Test::eq || is(TokenType::open_paren)) {
      fail(at,
           "tests with an argument ('is " + name +
               "(...)') are not supported: compare with "
               "'==', or use selectattr(name, '" +
               name + "', value)",
           kSupportedFix);
    }
    auto expr = node(ExprKind::test, at);
    expr->test = *test;
    expr->name = name;
    expr->negated = negated;
    expr->operands.push_back(std::move(operand));
    operand = std::move(expr);
  }
  return operand;
}

ExprPtr Parser::parse_filter() {
  ExprPtr operand = parse_unary_sign();
  while (is(TokenType::pipe)) {
    const int at = tokens_[current_++].line;
    if (!is(TokenType::identifier)) syntax("expected a filter's name after '|'");
    const std::string name = tokens_[current_++].value;
    const auto filter = find_filter(name);
    if (!filter) fail(at, "the filter '" + name + "' is not supported", kSupportedFix);
    auto expr = node(ExprKind::filter, at);
    expr->filter = *filter;
    expr->name = name;
    expr->called = is(TokenType::open_paren);
    if (expr->called) expr->arguments = parse_arguments(false);
    expr->operands.push_back(std::move(operand));
    check_filter(*expr);
    operand = std::move(expr);
  }
  return operand;
}

// The filters whose arguments the reference reads at parse time or always refuses.
void Parser::check_filter(const Expr& filter) const {
  const std::vector<Argument>& args = filter.arguments;
  const auto refuse = [&](const std::string& why) { fail(filter.line, why, kSupportedFix); };
  const auto check_test_name = [&](std::size_t index) {
    if (args.size() <= index) return;
    const std::string& test = args[index].value->literal.str();
    if (!find_test(test)) refuse("the test '" + test + "' is not supported");
    if ((test == "equalto" || test == "eq") && args.size() <= index + 1) {
      refuse("the test '" + test + "' needs the value to compare with");
    }
  };
  switch (filter.filter) {
    case Filter::selectattr:
    case Filter::rejectattr:
      if (args.empty() || args.size() > 3 ||
          !std::all_of(args.begin(), args.end(), is_string_literal)) {
        refuse(filter.name + " takes one to three strings: an attribute, a test, a value");
      }
      check_test_name(1);
      return;
    case Filter::select:
    case Filter::reject:
      if (!filter.called) return;
      if (args.empty() || args.size() > 2 || !is_string_literal(args[0]) ||
          !args.back().keyword.empty()) {
        refuse(filter.name + " takes a test's name and at most one value");
      }
      check_test_name(0);
      return;
    case Filter::map: {
      const bool attribute = std::any_of(
          args.begin(), args.end(), [](const Argument& a) { return a.keyword == "attribute"; });
      if (!attribute) refuse("map is supported with attribute= only (map(attribute='name'))");
      return;
    }
    default:
      return;
  }
}

ExprPtr Parser::parse_unary_sign() {
  const bool sign = (is(TokenType::unary_operator) || is(TokenType::additive_operator)) &&
                    (tokens_[current_].value == "-" || tokens_[current_].value == "+");
  if (!sign) return parse_call_member();
  const Token& token = tokens_[current_++];
  auto expr = node(ExprKind::unary, token.line);
  expr->op = token.value == "-" ? Operator::negate : Operator::plus;
  expr->operands.push_back(parse_unary_sign());
  return expr;
}

ExprPtr Parser::parse_call_member() {
  ExprPtr member = parse_member(parse_primary());
  return is(TokenType::open_paren) ? parse_call(std::move(member)) : std::move(member);
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  const int at = line();
  if (callee->kind == ExprKind::variable) called_names_.emplace_back(callee->name, at);
  if (callee->kind == ExprKind::member && callee->dotted &&
      callee->operands[1]->literal.kind == Kind::string) {
    const std::string& name = callee->operands[1]->literal.str();
    if (!find_method(name)) {
      fail(at,
           "the method '" + name +
               "()' is not supported (strata has the string methods "
               "upper, lower, strip, lstrip, rstrip, title, capitalize, startswith, endswith, "
               "split, replace, and the dict methods get, items, keys, values, dictsort)",
           kSupportedFix);
    }
  }
  auto call = node(ExprKind::call, at);
  call->operands.push_back(std::move(callee));
  call->arguments = parse_arguments(false);
  ExprPtr result = parse_member(std::move(call));
  return is(TokenType::open_paren) ? parse_call(std::move(result)) : std::move(result);
}

std::vector<Argument> Parser::parse_arguments(bool parameters) {
  expect(TokenType::open_paren, "'('");
  std::vector<Argument> arguments;
  bool keyword_seen = false;
  while (!is(TokenType::close_paren)) {
    if (current_ >= tokens_.size()) syntax("expected ')' to close the arguments");
    const int at = line();
    const bool spread = is(TokenType::exponentiation_operator) ||
                        (is(TokenType::multiplicative_operator) && tokens_[current_].value == "*");
    if (spread) fail(at, "argument unpacking (*args, **kwargs) is not supported", kSupportedFix);
    Argument argument{"", parse_expression()};
    if (is(TokenType::equals)) {
      ++current_;
      if (argument.value->kind != ExprKind::variable) {
        syntax(parameters ? "a parameter must be a name" : "a keyword argument must be a name");
      }
      argument.keyword = argument.value->name;
      argument.value = parse_expression();
    }
    if (parameters && argument.keyword.empty() && argument.value->kind != ExprKind::variable) {
      syntax("a parameter must be a name");
    }
    if (parameters) {
      const std::string& name = argument.keyword.empty() ? argument.value->name : argument.keyword;
      for (const Argument& other : arguments) {
        const std::string& seen = other.keyword.empty() ? other.value->name : other.keyword;
        if (seen == name) fail(at, "duplicate parameter name: " + name, "rename one of them");
      }
    }
    if (!argument.keyword.empty()) {
      keyword_seen = true;
    } else if (keyword_seen) {
      syntax(parameters ? "a parameter without a default follows one with a default"
                        : "a positional argument follows a keyword argument");
    }
    arguments.push_back(std::move(argument));
    if (is(TokenType::comma)) ++current_;
  }
  ++current_;
  return arguments;
}

ExprPtr Parser::parse_member(ExprPtr object) {
  while (is(TokenType::dot) || is(TokenType::open_square_bracket)) {
    const Token& token = tokens_[current_++];
    if (token.type == TokenType::open_square_bracket) {
      object = parse_subscript(std::move(object), token.line);
      continue;
    }
    ExprPtr property = parse_primary();
    const bool name = property->kind == ExprKind::variable;
    const bool index =
        property->kind == ExprKind::literal && property->literal.kind == Kind::integer;
    if (!name && !index) syntax("expected a name or an integer after '.'");
    if (name) {
      property->kind = ExprKind::literal;
      property->literal = Value::string(property->name);
    }
    auto member = node(ExprKind::member, token.line);
    member->dotted = true;
    member->operands.push_back(std::move(object));
    member->operands.push_back(std::move(property));
    object = std::move(member);
  }
  return object;
}

// `[key]` or a slice `[start:stop:step]`, any part left out.
ExprPtr Parser::parse_subscript(ExprPtr object, int at) {
  std::vector<ExprPtr> parts;
  bool slice = false;
  while (!is(TokenType::close_square_bracket)) {
    if (current_ >= tokens_.size()) syntax("expected ']'");
    if (is(TokenType::colon)) {
      parts.push_back(nullptr);
      ++current_;
      slice = true;
      continue;
    }
    parts.push_back(parse_expression());
    if (is(TokenType::colon)) {
      ++current_;
      slice = true;
    }
  }
  ++current_;
  if (parts.empty()) syntax("expected an index or a slice between '[' and ']'");
  if (slice && parts.size() > 3) syntax("a slice has at most three parts");
  auto expr = node(slice ? ExprKind::slice : ExprKind::member, at);
  expr->operands.push_back(std::move(object));
  for (ExprPtr& part : parts)
    expr->operands.push_back(std::move(part));
  while (slice && expr->operands.size() < 4)
    expr->operands.push_back(nullptr);
  return expr;
}

ExprPtr Parser::parse_primary() {
  if (current_ >= tokens_.size()) syntax("expected an expression, found the end of the template");
  const Token& token = tokens_[current_++];
  switch (token.type) {
    case TokenType::numeric_literal: {
      auto literal = node(ExprKind::literal, token.line);
      const double number = std::strtod(token.value.c_str(), nullptr);
      const bool fraction = token.value.find('.') != std::string::npos;
      literal->literal = fraction ? Value::floating(number) : Value::integer(number);
      return literal;
    }
    case TokenType::string_literal: {
      std::string text = token.value;
      while (is(TokenType::string_literal))
        text += tokens_[current_++].value;
      auto literal = node(ExprKind::literal, token.line);
      literal->literal = Value::string(std::move(text));
      return literal;
    }
    case TokenType::identifier: {
      auto variable = node(ExprKind::variable, token.line);
      variable->name = token.value;
      variable->slot = intern(token.value);
      if (!macros_.empty() && (token.value == "kwargs" || token.value == "varargs")) {
        (token.value == "kwargs" ? macros_.back()->takes_kwargs : macros_.back()->takes_varargs) =
            true;
      }
      return variable;
    }
    case TokenType::open_paren: {
      ExprPtr inner = parse_expression_sequence(false);
      expect(TokenType::close_paren, "')'");
      return inner;
    }
    case TokenType::open_square_bracket: {
      auto list = node(ExprKind::list, token.line);
      while (!is(TokenType::close_square_bracket)) {
        if (current_ >= tokens_.size()) syntax("expected ']' to close the list");
        list->operands.push_back(parse_expression());
        if (is(TokenType::comma)) ++current_;
      }
      ++current_;
      return list;
    }
    case TokenType::open_curly_bracket: {
      auto dict = node(ExprKind::dict, token.line);
      while (!is(TokenType::close_curly_bracket)) {
        if (current_ >= tokens_.size()) syntax("expected '}' to close the dict");
        dict->operands.push_back(parse_expression());
        expect(TokenType::colon, "':' between a key and its value");
        dict->operands.push_back(parse_expression());
        if (is(TokenType::comma)) ++current_;
      }
      ++current_;
      return dict;
    }
    default:
      --current_;
      syntax("expected an expression, found " + describe_current());
  }
}

}  // namespace strata::models::chat::jinja
