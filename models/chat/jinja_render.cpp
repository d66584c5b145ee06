#include "models/chat/jinja_render.h"

#include "models/chat/chat_template.h"
#include "models/chat/jinja_builtins.h"
#include "models/chat/jinja_operators.h"

namespace strata::models::chat::jinja {

namespace {

constexpr const char* kEvaluationFix =
    "the conversation does not fit what the template expects there (a missing key, a value of "
    "another type); fix the conversation, or the template";

// Macros calling macros deeper than this are refused rather than exhausting the stack.
constexpr int kCallDepthMax = 200;

struct Scope {
  const Scope* parent = nullptr;
  std::vector<std::pair<int, Value>> variables;

  const Value* find(int slot) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent) {
      for (const auto& [key, value] : scope->variables) {
        if (key == slot) return &value;
      }
    }
    return nullptr;
  }
  void set(int slot, Value value) {
    for (auto& [key, old] : variables) {
      if (key == slot) {
        old = std::move(value);
        return;
      }
    }
    variables.emplace_back(slot, std::move(value));
  }
};

enum class Flow { normal, break_loop, continue_loop };

Value global_function(Function function) {
  auto callable = std::make_shared<Callable>();
  callable->type = Callable::Type::function;
  callable->function = function;
  return Value::function(std::move(callable));
}

class Renderer {
 public:
  Renderer(const Template& program, const std::string& origin)
      : program_(program), origin_(origin) {}

  std::string run(Scope& root) {
    std::string out;
    exec_body(program_.body, root, out);
    return out;
  }

 private:
  Flow exec_body(const Body& body, Scope& scope, std::string& out);
  Flow exec(const Stmt& statement, Scope& scope, std::string& out);
  Flow exec_for(const Stmt& statement, Scope& scope, std::string& out);
  void assign(const Target& target, Value value, Scope& scope, int line);
  Value eval(const Expr& expr, Scope& scope);
  Value eval_unchecked(const Expr& expr, Scope& scope);
  Value eval_call(const Expr& expr, Scope& scope);
  Value call(const Value& function, const Args& args, Scope& scope, int line);
  Value call_macro(const Stmt& macro, const Args& args, Scope& call_site);
  Args eval_args(const std::vector<Argument>& arguments, Scope& scope);
  [[noreturn]] void fail(int line, const std::string& cause) const {
    throw TemplateError(origin_ + ", line " + std::to_string(line) + ": " + cause, kEvaluationFix);
  }

  const Template& program_;
  const std::string& origin_;
  int call_depth_ = 0;
};

Flow Renderer::exec_body(const Body& body, Scope& scope, std::string& out) {
  for (const auto& statement : body) {
    const Flow flow = exec(*statement, scope, out);
    if (flow != Flow::normal) return flow;
  }
  return Flow::normal;
}

Flow Renderer::exec(const Stmt& statement, Scope& scope, std::string& out) {
  switch (statement.kind) {
    case StmtKind::text:
      out += statement.text;
      return Flow::normal;
    case StmtKind::output: {
      const Value value = eval(*statement.expr, scope);
      if (value.kind == Kind::none || value.kind == Kind::undefined) return Flow::normal;
      try {
        out += to_output(value);
      } catch (const EvalError& error) {
        fail(statement.line, error.what());
      }
      return Flow::normal;
    }
    case StmtKind::if_:
      return exec_body(truthy(eval(*statement.expr, scope)) ? statement.body : statement.alternate,
                       scope, out);
    case StmtKind::for_:
      return exec_for(statement, scope, out);
    case StmtKind::set:
      assign(statement.target, eval(*statement.expr, scope), scope, statement.line);
      return Flow::normal;
    case StmtKind::set_block: {
      std::string text;
      const Flow flow = exec_body(statement.body, scope, text);
      if (flow != Flow::normal) return flow;
      assign(statement.target, Value::string(std::move(text)), scope, statement.line);
      return Flow::normal;
    }
    case StmtKind::macro: {
      auto callable = std::make_shared<Callable>();
      callable->type = Callable::Type::macro;
      callable->macro = &statement;
      scope.set(statement.slot, Value::function(std::move(callable)));
      return Flow::normal;
    }
    case StmtKind::break_:
      return Flow::break_loop;
    case StmtKind::continue_:
      return Flow::continue_loop;
  }
  return Flow::normal;
}

// The reference decides which items pass the inline `if` before the first iteration, binds the
// loop variables in the loop's one scope, and renders the else block when no iteration ran to
// its end (one that ended in break or continue does not count).
Flow Renderer::exec_for(const Stmt& statement, Scope& scope, std::string& out) {
  Scope loop_scope{&scope, {}};
  const Value iterable = eval(*statement.expr, loop_scope);
  std::vector<Value> items;
  if (iterable.is_list()) {
    items = iterable.items();
  } else if (iterable.is_object()) {
    for (const auto& entry : iterable.map().entries)
      items.push_back(Value::string(entry.first));
  } else {
    fail(statement.line, std::string("Expected iterable or object type in for loop: got ") +
                             type_name(iterable.kind));
  }
  if (statement.condition) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      Scope test_scope{&loop_scope, {}};
      assign(statement.target, item, test_scope, statement.line);
      if (truthy(eval(*statement.condition, test_scope))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  bool completed_one = false;
  const auto count = static_cast<double>(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    Value loop = Value::dict();
    const auto index = static_cast<double>(i);
    loop.map().entries = {{"index", Value::integer(index + 1)},
                          {"index0", Value::integer(index)},
                          {"revindex", Value::integer(count - index)},
                          {"revindex0", Value::integer(count - index - 1)},
                          {"first", Value::boolean(i == 0)},
                          {"last", Value::boolean(i + 1 == items.size())},
                          {"length", Value::integer(count)},
                          {"previtem", i > 0 ? items[i - 1] : Value{}},
                          {"nextitem", i + 1 < items.size() ? items[i + 1] : Value{}}};
    loop_scope.set(kSlotLoop, std::move(loop));
    assign(statement.target, items[i], loop_scope, statement.line);
    const std::size_t mark = out.size();
    const Flow flow = exec_body(statement.body, loop_scope, out);
    if (flow != Flow::normal) out.resize(mark);  // The iteration's text is dropped with it.
    if (flow == Flow::break_loop) break;
    if (flow == Flow::continue_loop) continue;
    completed_one = true;
  }
  if (!completed_one) return exec_body(statement.alternate, loop_scope, out);
  return Flow::normal;
}

void Renderer::assign(const Target& target, Value value, Scope& scope, int line) {
  switch (target.kind) {
    case Target::Kind::variable:
      scope.set(target.slots[0], std::move(value));
      return;
    case Target::Kind::tuple: {
      // A for loop unpacks lists only (not tuples), set unpacks both, as the reference does.
      if (!value.is_list()) {
        fail(line, std::string("Cannot unpack non-iterable type: ") + type_name(value.kind));
      }
      const std::vector<Value>& items = value.items();
      if (items.size() != target.slots.size()) {
        fail(line, std::string("Too ") + (target.slots.size() > items.size() ? "few" : "many") +
                       " items to unpack");
      }
      for (std::size_t i = 0; i < items.size(); ++i)
        scope.set(target.slots[i], items[i]);
      return;
    }
    case Target::Kind::attribute: {
      const Value object = eval(*target.object, scope);
      if (object.kind != Kind::name_space) {
        fail(line, "cannot assign attribute on non-namespace object");
      }
      object.map().set(target.attribute, std::move(value));
      return;
    }
  }
}

Value Renderer::eval(const Expr& expr, Scope& scope) {
  try {
    return eval_unchecked(expr, scope);
  } catch (const EvalError& error) {
    fail(expr.line, error.what());
  }
}

Value Renderer::eval_unchecked(const Expr& expr, Scope& scope) {
  const auto operand = [&](std::size_t i) {
    return expr.operands[i] ? eval(*expr.operands[i], scope) : Value{};
  };
  switch (expr.kind) {
    case ExprKind::literal:
      return expr.literal;
    case ExprKind::variable: {
      const Value* found = scope.find(expr.slot);
      return found != nullptr ? *found : Value{};
    }
    case ExprKind::list:
    case ExprKind::tuple: {
      std::vector<Value> items;
      for (std::size_t i = 0; i < expr.operands.size(); ++i)
        items.push_back(operand(i));
      return Value::list(std::move(items), expr.kind == ExprKind::list ? Kind::list : Kind::tuple);
    }
    case ExprKind::dict: {
      Value dict = Value::dict();
      for (std::size_t i = 0; i < expr.operands.size(); i += 2) {
        const Value key = operand(i);
        if (key.kind != Kind::string) {
          throw EvalError(std::string("Object keys must be strings: got ") + type_name(key.kind));
        }
        dict.map().set(key.str(), operand(i + 1));
      }
      return dict;
    }
    case ExprKind::member:
      return get_member(operand(0), operand(1));
    case ExprKind::slice:
      return slice_value(operand(0), operand(1), operand(2), operand(3));
    case ExprKind::call:
      return eval_call(expr, scope);
    case ExprKind::filter:
      return apply_filter(expr.filter, expr.called, operand(0), eval_args(expr.arguments, scope));
    case ExprKind::test:
      return Value::boolean(apply_test(expr.test, operand(0), nullptr) != expr.negated);
    case ExprKind::unary:
      if (expr.op == Operator::logical_not) return Value::boolean(!truthy(operand(0)));
      return sign_operation(expr.op, operand(0));
    case ExprKind::binary: {
      Value left = operand(0);
      if (expr.op == Operator::logical_and) return truthy(left) ? operand(1) : left;
      if (expr.op == Operator::logical_or) return truthy(left) ? left : operand(1);
      return binary_operation(expr.op, left, operand(1));
    }
    case ExprKind::ternary:
      return truthy(operand(0)) ? operand(1) : operand(2);
    case ExprKind::select:
      return truthy(operand(1)) ? operand(0) : Value{};
  }
  return {};
}

Value Renderer::eval_call(const Expr& expr, Scope& scope) {
  const Args args = eval_args(expr.arguments, scope);
  const Expr& callee = *expr.operands[0];
  if (callee.kind != ExprKind::member) return call(eval(callee, scope), args, scope, expr.line);
  const Value object = eval(*callee.operands[0], scope);
  const Value property = eval(*callee.operands[1], scope);
  // A dict's own entry comes before its methods, as the reference looks entries up first; a
  // method is called without binding it to a new function value.
  if (property.kind == Kind::string) {
    const Value* own = object.is_mapping() ? object.map().find(property.str()) : nullptr;
    if (own == nullptr) {
      if (const auto method = member_method(object, property.str())) {
        return call_method(*method, object, args.flattened());
      }
    }
  }
  return call(get_member(object, property), args, scope, expr.line);
}

Value Renderer::call(const Value& function, const Args& args, Scope& scope, int line) {
  if (function.kind != Kind::function) {
    throw EvalError(std::string("Cannot call something that is not a function: got ") +
                    type_name(function.kind));
  }
  const Callable& callable = function.callable();
  switch (callable.type) {
    case Callable::Type::method:
      return call_method(callable.method, callable.self, args.flattened());
    case Callable::Type::macro:
      return call_macro(*callable.macro, args, scope);
    case Callable::Type::function:
      break;
  }
  if (callable.function != Function::raise_exception) return call_function(callable.function, args);
  const Value message = args.positional.empty() ? Value{} : args.positional[0];
  const std::string text = message.kind == Kind::none ? "null" : to_js_string(message);
  throw TemplateError(text, origin_ + " raised this at line " + std::to_string(line) +
                                ": the conversation is not one the chat template accepts; fix "
                                "the conversation, or choose another template");
}

Value Renderer::call_macro(const Stmt& macro, const Args& args, Scope& call_site) {
  if (call_depth_ >= kCallDepthMax) {
    fail(macro.line, "macro calls nest deeper than " + std::to_string(kCallDepthMax));
  }
  Scope scope{&call_site, {}};
  std::vector<std::pair<std::string, Value>> keyword = args.keyword;
  std::vector<const Parameter*> pending;
  const std::size_t count = macro.parameters.size();
  for (std::size_t i = 0; i < count; ++i) {
    const Parameter& parameter = macro.parameters[i];
    std::optional<Value> value;
    if (i < args.positional.size()) value = args.positional[i];
    const auto named = std::find_if(keyword.begin(), keyword.end(), [&](const auto& entry) {
      return entry.first == parameter.name;
    });
    if (!value && named != keyword.end()) {
      value = named->second;
      keyword.erase(named);
    }
    if (!value && parameter.default_value) pending.push_back(&parameter);
    scope.set(parameter.slot, value.value_or(Value{}));
  }
  const std::string name = "macro '" + macro.name + "'";
  if (macro.takes_kwargs) {
    Value kwargs = Value::dict();
    for (auto& [key, value] : keyword)
      kwargs.map().set(key, value);
    scope.set(kSlotKwargs, std::move(kwargs));
  } else if (!keyword.empty()) {
    throw EvalError(name + " takes no keyword argument '" + keyword.front().first + "'");
  }
  if (macro.takes_varargs) {
    std::vector<Value> rest;
    for (std::size_t i = count; i < args.positional.size(); ++i)
      rest.push_back(args.positional[i]);
    scope.set(kSlotVarargs, Value::list(std::move(rest)));
  } else if (args.positional.size() > count) {
    throw EvalError(name + " takes not more than " + std::to_string(count) + " argument(s)");
  }
  for (const Parameter* parameter : pending)
    scope.set(parameter->slot, eval(*parameter->default_value, scope));
  std::string out;
  ++call_depth_;
  exec_body(macro.body, scope, out);
  --call_depth_;
  return Value::string(std::move(out));
}

Args Renderer::eval_args(const std::vector<Argument>& arguments, Scope& scope) {
  Args args;
  for (const Argument& argument : arguments) {
    if (argument.keyword.empty()) args.positional.push_back(eval(*argument.value, scope));
  }
  for (const Argument& argument : arguments) {
    if (argument.keyword.empty()) continue;
    if (args.find(argument.keyword) != nullptr) {
      throw EvalError("Got multiple values for keyword argument '" + argument.keyword + "'");
    }
    args.keyword.emplace_back(argument.keyword, eval(*argument.value, scope));
  }
  return args;
}

}  // namespace

std::string render_template(const Template& program, const std::string& origin,
                            Variables variables) {
  Scope root;
  root.variables = std::move(variables);
  root.set(kSlotNamespace, global_function(Function::namespace_));
  root.set(kSlotRaiseException, global_function(Function::raise_exception));
  root.set(kSlotRange, global_function(Function::range));
  root.set(kSlotStrftimeNow, global_function(Function::strftime_now));
  for (const int slot : {kSlotTrue, kSlotTrueTitle})
    root.set(slot, Value::boolean(true));
  for (const int slot : {kSlotFalse, kSlotFalseTitle})
    root.set(slot, Value::boolean(false));
  for (const int slot : {kSlotNone, kSlotNoneTitle})
    root.set(slot, Value::none());
  return Renderer(program, origin).run(root);
}

}  // namespace strata::models::chat::jinja
