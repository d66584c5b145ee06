// strata._native: the C++ side of the Python package (python/strata/). Its functions take the
// addresses of arrays that the Python side has checked and keeps alive; they release the GIL
// while they work.
#include <pybind11/pybind11.h>

#include <exception>
#include <string>

#include "base/error.h"
#include "python/native/aio.h"
#include "python/native/optim.h"

PYBIND11_MODULE(_native, module) {
  module.doc() = "strata's C++ engine pieces for Python: the CPU optimizers' steps, the aio handle";
  // A hyperparameter out of range, a NUMA node that is not there: a ValueError with the cause
  // and its fix, as the command line prints them.
  pybind11::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) std::rethrow_exception(raised);
    } catch (const strata::UserError& error) {
      const std::string message = std::string(error.what()) + "; fix: " + error.fix();
      PyErr_SetString(PyExc_ValueError, message.c_str());
    }
  });
  strata::python::add_optimizer_steps(module);
  // After the UserError translator: pybind11 asks the last registered first, and an I/O error is
  // a UserError that becomes OSError.
  strata::python::add_aio(module);
}
