#include "python/native/errors.h"

#include <pybind11/pybind11.h>

#include <cerrno>
#include <exception>
#include <string>

#include "aio/errors.h"
#include "base/error.h"

namespace strata::python {
namespace {

namespace py = pybind11;

void raise_os_error(int errno_value, const std::string& message, const std::string& path) {
  py::object error =
      py::module_::import("builtins")
          .attr("OSError")(errno_value, message, path.empty() ? py::none() : py::cast(path));
  PyErr_SetObject(PyExc_OSError, error.ptr());
}

}  // namespace

void translate_errors() {
  py::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) std::rethrow_exception(raised);
    } catch (const aio::IoError& error) {
      // A read past the end of a file has no errno: EIO.
      const int number = error.errno_value() != 0 ? error.errno_value() : EIO;
      raise_os_error(number, std::string(error.what()) + "; fix: " + error.fix(), error.path());
    } catch (const SystemError& error) {
      raise_os_error(error.errno_value, error.message, "");
    } catch (const UserError& error) {
      const std::string message = std::string(error.what()) + "; fix: " + error.fix();
      PyErr_SetString(PyExc_ValueError, message.c_str());
    }
  });
}

}  // namespace strata::python
