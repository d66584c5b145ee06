// strata._native: the C++ side of the Python package (python/strata/). Its functions take the
// addresses of arrays that the Python side has checked and keeps alive; they release the GIL
// while they work.
#include <pybind11/pybind11.h>

#include "python/native/aio.h"
#include "python/native/errors.h"
#include "python/native/nvme_optimizer.h"
#include "python/native/optim.h"

PYBIND11_MODULE(_native, module) {
  module.doc() = "strata's C++ engine pieces for Python: the CPU optimizers' steps, the aio handle";
  strata::python::translate_errors();
  strata::python::add_optimizer_steps(module);
  strata::python::add_nvme_optimizer(module);
  strata::python::add_aio(module);
}
