#pragma once

#include <pybind11/pybind11.h>

namespace strata::python {

// strata._native's AioHandle (strata/aio.py wraps it as DeepNVMe's aio_handle) and LockedBuffer
// (page-locked memory for new_cpu_locked_tensor).
void add_aio(pybind11::module_& module);

}  // namespace strata::python
