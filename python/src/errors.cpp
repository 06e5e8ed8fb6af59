// kiln::Error -> the exception classes of kiln.errors (python/kiln/errors.py), which also derive
// from the built-in exception a Python caller expects (ValueError, TypeError, KeyError, OSError,
// NotImplementedError), as onnxruntime.training raises them.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "kiln/error.h"

namespace kiln::python {

namespace {

void raise(const char* cls, const Error& e) {
  py::object type = py::module_::import("kiln.errors").attr(cls);
  PyErr_SetString(type.ptr(), e.what());
}

}  // namespace

void register_errors(py::module_& m) {
  (void)m;
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const KeyError& e) {
      raise("KilnKeyError", e);
    } catch (const InvalidArgument& e) {
      raise("InvalidArgument", e);
    } catch (const CorruptFile& e) {
      raise("CorruptFile", e);
    } catch (const IOError& e) {
      raise("KilnIOError", e);
    } catch (const ShapeError& e) {
      raise("ShapeError", e);
    } catch (const TypeError& e) {
      raise("DTypeError", e);
    } catch (const Unsupported& e) {
      raise("Unsupported", e);
    } catch (const InvalidModel& e) {
      raise("InvalidModel", e);
    } catch (const Error& e) {
      raise("KilnError", e);
    }
  });
}

}  // namespace kiln::python
