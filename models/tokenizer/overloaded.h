#pragma once

namespace strata::models::tokenizer {

// A visitor made of lambdas, one per alternative of a component's std::variant of steps.
template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};

}  // namespace strata::models::tokenizer
