#pragma once

#include <pybind11/pybind11.h>

namespace strata::python {

// strata._native's NvmeOptimizer: optimizer states on NVMe for strata.optim (states="nvme").
void add_nvme_optimizer(pybind11::module_& module);

}  // namespace strata::python
