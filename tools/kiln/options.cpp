#include "options.h"

#include <fmt/format.h>

namespace kiln::cli {

std::vector<std::string> split_list(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      const size_t comma = item.find(',', start);
      const std::string part = item.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!part.empty()) out.push_back(part);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& items) {
  std::map<std::string, int64_t> dims;
  for (const std::string& item : split_list(items)) {
    const size_t eq = item.find('=');
    int64_t value = 0;
    size_t used = 0;
    bool ok = eq != std::string::npos && eq > 0;
    if (ok) {
      try {
        value = std::stoll(item.substr(eq + 1), &used);
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok || used != item.size() - eq - 1 || value <= 0)
      throw InvalidArgument(fmt::format("--dim '{}' is not NAME=POSITIVE_INTEGER (e.g. batch=8)", item));
    dims[item.substr(0, eq)] = value;
  }
  return dims;
}

std::map<std::string, TensorMeta> example_feeds(const Model& m, const std::map<std::string, int64_t>& dims) {
  std::map<std::string, TensorMeta> feeds;
  for (const ValueInfo& v : m.graph.inputs) {
    if (!v.has_type || !v.has_shape)
      throw InvalidArgument(
          fmt::format("input '{}' has no declared dtype and shape; Kiln cannot plan without them", v.name));
    Shape shape;
    for (const Dim& d : v.dims) {
      if (d.value >= 0) shape.push_back(d.value);
      else if (auto it = dims.find(d.param); it != dims.end()) shape.push_back(it->second);
      else shape.push_back(1);
    }
    checked_bytes(shape, dtype_size(v.dtype));  // ShapeError for sizes no machine holds (--dim batch=2^62)
    feeds[v.name] = TensorMeta{v.dtype, shape, false, Tensor()};
  }
  return feeds;
}

std::vector<int64_t> parse_ids(const std::string& text, const std::string& flag) {
  std::vector<int64_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    try {
      size_t used = 0;
      ids.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw InvalidArgument(fmt::format("{}: '{}' is not an integer (ids are comma-separated)", flag, item));
    }
    start = end + 1;
  }
  return ids;
}

}  // namespace kiln::cli
