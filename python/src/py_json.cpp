// JSON <-> Python values, and Python objects held by C++ (see trainer_bindings.h).
#include <fmt/format.h>

#include "kiln/error.h"
#include "trainer_bindings.h"

namespace kiln::python {

namespace {

std::string type_name(const py::handle& obj) { return py::str(obj.get_type().attr("__name__")); }

}  // namespace

nlohmann::json json_from_py(const py::handle& obj, const std::string& where) {
  if (obj.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(obj)) return obj.cast<bool>();
  if (py::isinstance<py::int_>(obj)) return obj.cast<int64_t>();
  if (py::isinstance<py::float_>(obj)) return obj.cast<double>();
  if (py::isinstance<py::str>(obj)) return obj.cast<std::string>();
  if (py::isinstance<py::dict>(obj)) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(obj)) {
      if (!py::isinstance<py::str>(k))
        throw TypeError(fmt::format("{}: keys must be str, not {}", where, type_name(k)));
      const std::string key = k.cast<std::string>();
      out[key] = json_from_py(v, where + "['" + key + "']");
    }
    return out;
  }
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    nlohmann::json out = nlohmann::json::array();
    size_t i = 0;
    for (const auto& v : py::reinterpret_borrow<py::sequence>(obj))
      out.push_back(json_from_py(v, fmt::format("{}[{}]", where, i++)));
    return out;
  }
  // numpy scalars (np.float32(0.1), np.int64(3)) and 0-d arrays: their Python value.
  if (py::hasattr(obj, "item") && py::hasattr(obj, "dtype") && py::getattr(obj, "ndim").cast<int>() == 0)
    return json_from_py(obj.attr("item")(), where);
  if (py::hasattr(obj, "__fspath__")) return py::str(py::module_::import("os").attr("fspath")(obj)).cast<std::string>();
  throw TypeError(fmt::format("{}: a value of type {} cannot be stored (use None, bool, int, float, str, list or dict)",
                              where, type_name(obj)));
}

py::object py_from_json(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return py::none();
    case nlohmann::json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return py::int_(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return py::int_(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return py::float_(j.get<double>());
    case nlohmann::json::value_t::string:
      return py::str(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      py::list out;
      for (const auto& v : j) out.append(py_from_json(v));
      return out;
    }
    case nlohmann::json::value_t::object: {
      py::dict out;
      for (const auto& [k, v] : j.items()) out[py::str(k)] = py_from_json(v);
      return out;
    }
    default:
      break;
  }
  return py::none();  // binary and discarded values do not occur in Kiln's JSON
}

PyRef hold(py::object obj) {
  return PyRef(new py::object(std::move(obj)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

}  // namespace kiln::python
