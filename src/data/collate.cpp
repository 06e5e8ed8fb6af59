// The default collator: stacks each column of a batch's items along a new first dimension.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "kiln/data.h"

namespace kiln::data {

Example default_collate(const std::vector<Example>& items) {
  if (items.empty()) throw InvalidArgument("default_collate: no items to collate");
  const Example& first = items.front();
  for (size_t i = 1; i < items.size(); ++i) {
    if (items[i].size() == first.size()) continue;
    // Name one column that is in one item and not the other.
    const auto missing = [](const Example& a, const Example& b) {
      for (const auto& [name, t] : a)
        if (!b.count(name)) return name;
      return std::string();
    };
    const std::string in_first = missing(first, items[i]);
    if (!in_first.empty())
      throw ShapeError(fmt::format("default_collate: item {} lacks column '{}' that item 0 has", i, in_first));
    throw ShapeError(
        fmt::format("default_collate: item {} has column '{}' that item 0 lacks", i, missing(items[i], first)));
  }

  Example batch;
  const auto count = static_cast<int64_t>(items.size());
  for (const auto& [name, proto] : first) {
    if (!proto.defined())
      throw InvalidArgument(fmt::format("default_collate: column '{}' of item 0 is undefined", name));
    Shape shape{count};
    shape.insert(shape.end(), proto.shape().begin(), proto.shape().end());
    Tensor out = Tensor::empty(proto.dtype(), shape);
    const size_t item_bytes = proto.nbytes();
    auto* dst = static_cast<unsigned char*>(out.raw_data());
    for (size_t i = 0; i < items.size(); ++i) {
      auto it = items[i].find(name);
      if (it == items[i].end())
        throw ShapeError(fmt::format("default_collate: item {} lacks column '{}' that item 0 has", i, name));
      const Tensor& t = it->second;
      if (!t.defined())
        throw InvalidArgument(fmt::format("default_collate: column '{}' of item {} is undefined", name, i));
      if (t.dtype() != proto.dtype())
        throw TypeError(fmt::format("default_collate: column '{}' is {} in item {} but {} in item 0", name,
                                    dtype_name(t.dtype()), i, dtype_name(proto.dtype())));
      if (t.shape() != proto.shape())
        throw ShapeError(fmt::format("default_collate: column '{}' has shape {} in item {} but {} in item 0", name,
                                     to_string(t.shape()), i, to_string(proto.shape())));
      if (t.is_contiguous()) std::memcpy(dst + i * item_bytes, t.raw_data(), item_bytes);
      else std::memcpy(dst + i * item_bytes, t.contiguous().raw_data(), item_bytes);
    }
    batch.emplace(name, std::move(out));
  }
  return batch;
}

}  // namespace kiln::data
