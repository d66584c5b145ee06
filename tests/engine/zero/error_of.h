#pragma once

#include <gtest/gtest.h>

#include "base/error.h"

namespace strata::engine::zero {

// The UserError that `call` throws (a failed expectation when it throws none).
template <typename Call>
UserError error_of(Call call) {
  try {
    call();
  } catch (const UserError& error) {
    return error;
  }
  ADD_FAILURE() << "expected a UserError";
  return UserError("", "");
}

}  // namespace strata::engine::zero
