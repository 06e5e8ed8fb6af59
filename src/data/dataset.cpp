// Datasets: the interface's defaults, TensorDataset (row views), ExampleListDataset, CollatedDataset,
// Subset and ConcatDataset.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "kiln/data.h"

namespace kiln::data {

Dataset::~Dataset() = default;

std::vector<std::string> Dataset::columns() const {
  std::vector<std::string> names;
  if (size() == 0) return names;
  for (const auto& [name, tensor] : get(0)) names.push_back(name);
  return names;
}

Example Dataset::get_batch(const std::vector<size_t>& indices, const Collator& collate) const {
  std::vector<Example> items;
  items.reserve(indices.size());
  for (size_t i : indices) items.push_back(get(i));
  return collate(items);
}

int64_t Dataset::item_length(size_t index, const std::string& length_column, const std::string& input_column) const {
  const Example item = get(index);
  if (const auto it = item.find(length_column); it != item.end()) {
    if (it->second.numel() != 1)
      throw ShapeError(fmt::format("item {}: the length column '{}' has shape {}; it must hold one number", index,
                                   length_column, to_string(it->second.shape())));
    return static_cast<int64_t>(it->second.item_as_double());
  }
  const auto it = item.find(input_column);
  if (it == item.end())
    throw ShapeError(fmt::format("item {} has neither a '{}' column nor a '{}' column to take its length from", index,
                                 length_column, input_column));
  if (it->second.rank() == 0)
    throw ShapeError(
        fmt::format("item {}: column '{}' is a scalar; its length is its first dimension", index, input_column));
  return it->second.dim(0);
}

std::vector<int64_t> item_lengths(const Dataset& dataset, const std::string& length_column,
                                  const std::string& input_column) {
  std::vector<int64_t> lengths(dataset.size());
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = dataset.item_length(i, length_column, input_column);
  return lengths;
}

Example ExampleListDataset::get(size_t index) const {
  if (index >= items_.size())
    throw InvalidArgument(fmt::format("dataset index {} is out of range for {} items", index, items_.size()));
  return items_[index];
}

CollatedDataset::CollatedDataset(std::shared_ptr<const Dataset> dataset, Collator collate)
    : dataset_(std::move(dataset)), collate_(std::move(collate)) {
  if (!dataset_) throw InvalidArgument("CollatedDataset: the dataset is null");
  if (!collate_) throw InvalidArgument("CollatedDataset: the collator is empty");
}

std::vector<std::string> CollatedDataset::columns() const {
  std::vector<std::string> names;
  if (size() == 0) return names;
  for (const auto& [name, t] : get_batch({0}, nullptr)) names.push_back(name);
  return names;
}

Example CollatedDataset::get_batch(const std::vector<size_t>& indices, const Collator& /*collate*/) const {
  return dataset_->get_batch(indices, collate_);
}

TensorDataset::TensorDataset(std::map<std::string, Tensor> columns) : columns_(std::move(columns)) {
  if (columns_.empty()) throw InvalidArgument("TensorDataset: no columns");
  const std::string* first = nullptr;
  for (auto& [name, tensor] : columns_) {
    if (!tensor.defined())
      throw InvalidArgument(fmt::format("TensorDataset: column '{}' is an undefined tensor", name));
    if (tensor.rank() == 0)
      throw ShapeError(
          fmt::format("TensorDataset: column '{}' is a scalar; every column needs a first (item) dimension", name));
    // Items are views at fixed row offsets, which needs packed rows.
    tensor = tensor.contiguous();
    if (first == nullptr) {
      first = &name;
      size_ = static_cast<size_t>(tensor.dim(0));
    } else if (static_cast<size_t>(tensor.dim(0)) != size_) {
      throw ShapeError(
          fmt::format("TensorDataset: column '{}' has {} items (shape {}) but column '{}' has {} (shape {})", name,
                      tensor.dim(0), to_string(tensor.shape()), *first, size_, to_string(columns_.at(*first).shape())));
    }
  }
}

Example TensorDataset::get(size_t index) const {
  if (index >= size_)
    throw InvalidArgument(fmt::format("TensorDataset: index {} is out of range for {} items", index, size_));
  Example item;
  for (const auto& [name, tensor] : columns_) {
    const Shape row_shape(tensor.shape().begin() + 1, tensor.shape().end());
    const size_t row_bytes = static_cast<size_t>(numel(row_shape)) * dtype_size(tensor.dtype());
    item.emplace(
        name, Tensor::view_of(tensor.storage(), tensor.byte_offset() + index * row_bytes, tensor.dtype(), row_shape));
  }
  return item;
}

std::vector<std::string> TensorDataset::columns() const {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : columns_) names.push_back(name);
  return names;
}

const Tensor& TensorDataset::column(const std::string& name) const {
  auto it = columns_.find(name);
  if (it == columns_.end())
    throw KeyError(fmt::format("TensorDataset has no column '{}' (it has: {})", name, fmt::join(columns(), ", ")));
  return it->second;
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<size_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  if (!dataset_) throw InvalidArgument("Subset: the dataset is null");
  const size_t n = dataset_->size();
  for (size_t i = 0; i < indices_.size(); ++i)
    if (indices_[i] >= n)
      throw InvalidArgument(
          fmt::format("Subset: index {} (position {}) is out of range for a dataset of {} items", indices_[i], i, n));
}

Example Subset::get(size_t index) const {
  if (index >= indices_.size())
    throw InvalidArgument(fmt::format("Subset: index {} is out of range for {} items", index, indices_.size()));
  return dataset_->get(indices_[index]);
}

ConcatDataset::ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets) : datasets_(std::move(datasets)) {
  if (datasets_.empty()) throw InvalidArgument("ConcatDataset: no datasets");
  size_t total = 0;
  std::vector<std::string> first_columns;
  for (size_t i = 0; i < datasets_.size(); ++i) {
    if (!datasets_[i]) throw InvalidArgument(fmt::format("ConcatDataset: dataset {} is null", i));
    const std::vector<std::string> cols = datasets_[i]->columns();
    if (i == 0) first_columns = cols;
    else if (cols != first_columns)
      throw ShapeError(fmt::format("ConcatDataset: dataset {} has columns [{}] but dataset 0 has [{}]", i,
                                   fmt::join(cols, ", "), fmt::join(first_columns, ", ")));
    total += datasets_[i]->size();
    offsets_.push_back(total);
  }
}

Example ConcatDataset::get(size_t index) const {
  if (index >= size())
    throw InvalidArgument(fmt::format("ConcatDataset: index {} is out of range for {} items", index, size()));
  // The first dataset whose cumulative end lies past index.
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), index);
  const auto d = static_cast<size_t>(it - offsets_.begin());
  return datasets_[d]->get(index - (d == 0 ? 0 : offsets_[d - 1]));
}

std::vector<std::string> ConcatDataset::columns() const { return datasets_.front()->columns(); }

}  // namespace kiln::data
