#pragma once

namespace strata::models::tokenizer {

// A visitor made of lambdas, one per alternative of a component's std::variant of steps.
template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
// Spelled out for compilers without C++20's deduction for aggregates (clang 14).
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace strata::models::tokenizer
