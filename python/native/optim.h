#pragma once

#include <pybind11/pybind11.h>

namespace strata::python {

// strata._native's optimizer steps (strata/optim.py calls them): adam_step, adagrad_step and
// lion_step over arrays the caller owns.
void add_optimizer_steps(pybind11::module_& module);

}  // namespace strata::python
