#pragma once

#include <string>

namespace strata::python {

// An operating system's or a disk's refusal, raised in Python as OSError(errno, message): an
// mlock refused, a step whose swap transfers failed.
struct SystemError {
  int errno_value;
  std::string message;
};

// Registers the translations of strata's errors into Python's: aio::IoError and ChecksumError
// become OSError(errno, message naming the offset and the fix, path); SystemError OSError; any
// other UserError ValueError("cause; fix: ..."). Once, when the module is made.
void translate_errors();

}  // namespace strata::python
