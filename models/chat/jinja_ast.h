#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/chat/jinja_builtins.h"
#include "models/chat/jinja_value.h"

// The parsed template: statements and expressions as @huggingface/jinja's parser builds them,
// with every name already resolved (a variable to a slot, a filter, test or method to its
// enumerator), so that rendering looks nothing up by string but dict keys.
namespace strata::models::chat::jinja {

// The slots of the names every template has: the variables transformers passes and the globals.
// Other names get the slots after these, in order of appearance.
enum Slot : int {
  kSlotLoop,
  kSlotMessages,
  kSlotTools,
  kSlotDocuments,
  kSlotAddGenerationPrompt,
  kSlotBosToken,
  kSlotEosToken,
  kSlotKwargs,
  kSlotVarargs,
  kSlotNamespace,
  kSlotRaiseException,
  kSlotRange,
  kSlotStrftimeNow,
  kSlotTrue,
  kSlotFalse,
  kSlotNone,
  kSlotTrueTitle,
  kSlotFalseTitle,
  kSlotNoneTitle,
  kSlotCount,
};

enum class ExprKind : std::uint8_t {
  literal,   // literal
  variable,  // slot, name
  list,      // operands: the items
  tuple,     // operands: the items
  dict,      // operands: key, value, key, value, ...
  member,    // operands: object, property (a literal when written with a dot)
  slice,     // operands: object, start, stop, step (each may be null)
  call,      // operands: callee; arguments
  filter,    // operands: the operand; filter, called, arguments
  test,      // operands: the operand; test, negated
  unary,     // op; operands: the operand
  binary,    // op; operands: left, right
  ternary,   // operands: condition, value if true, value if false
  select,    // `a if c` without else: operands: value, condition
};

enum class Operator : std::uint8_t {
  add,
  subtract,
  multiply,
  divide,
  floor_divide,
  modulo,
  power,
  concat,
  equal,
  not_equal,
  less,
  greater,
  less_equal,
  greater_equal,
  in,
  not_in,
  logical_and,
  logical_or,
  logical_not,
  negate,
  plus,
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Argument {
  std::string keyword;  // empty: positional
  ExprPtr value;
};

struct Expr {
  ExprKind kind{};
  int line = 0;
  Value literal;
  int slot = -1;
  std::string name;  // a variable's, filter's or test's name, for messages
  Operator op{};
  Filter filter{};
  Test test{};
  bool called = false;   // a filter written with parentheses
  bool negated = false;  // `is not`
  bool dotted = false;   // a member written `object.name` rather than `object[...]`
  std::vector<ExprPtr> operands;
  std::vector<Argument> arguments;
};

enum class StmtKind : std::uint8_t {
  text,
  output,
  if_,
  for_,
  set,
  set_block,
  macro,
  break_,
  continue_,
};

// What `set` and `for` assign to: a variable, a tuple of variables, or a namespace's attribute.
struct Target {
  enum class Kind : std::uint8_t { variable, tuple, attribute };
  Kind kind = Kind::variable;
  std::vector<int> slots;
  ExprPtr object;  // attribute: the namespace
  std::string attribute;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Parameter {
  int slot = -1;
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind{};
  int line = 0;
  std::string text;   // text
  ExprPtr expr;       // output: the value; if: the condition; for: the iterable; set: the value
  ExprPtr condition;  // for: the inline `if` filter (may be null)
  Target target;      // set, set_block, for
  Body body;          // if, for, set_block, macro
  Body alternate;     // if: else (an elif is a nested if); for: else
  // macro
  std::string name;
  int slot = -1;
  std::vector<Parameter> parameters;
  bool takes_kwargs = false;   // its body reads `kwargs`: extra keyword arguments go there
  bool takes_varargs = false;  // its body reads `varargs`
};

struct Template {
  Body body;
  std::vector<std::string> names;  // by slot
};

}  // namespace strata::models::chat::jinja
