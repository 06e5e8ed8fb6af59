#include "trainer/loop/batch_padding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "kiln/error.h"

namespace kiln::trainer {

namespace {

template <class T>
void fill_rows(Tensor& t, int64_t from, T value) {
  const int64_t row = t.numel() / t.dim(0);
  std::fill(t.data<T>() + from * row, t.data<T>() + t.numel(), value);
}

}  // namespace

int64_t pad_batch(data::Example& batch, int64_t batch_size, const std::vector<std::string>& label_columns) {
  if (batch.empty()) return 0;
  const int64_t rows = batch.begin()->second.dim(0);
  if (rows >= batch_size) return rows;
  for (auto& [name, column] : batch) {
    const Tensor t = column.is_contiguous() ? column : column.clone();
    Shape shape = t.shape();
    shape[0] = batch_size;
    Tensor padded = Tensor::empty(t.dtype(), shape);
    const size_t row_bytes = t.nbytes() / static_cast<size_t>(rows);
    std::memcpy(padded.raw_data(), t.raw_data(), t.nbytes());
    const bool label = std::find(label_columns.begin(), label_columns.end(), name) != label_columns.end();
    if (label && t.dtype() == DType::Int64) {
      fill_rows<int64_t>(padded, rows, -100);
    } else if (label && t.dtype() == DType::Int32) {
      fill_rows<int32_t>(padded, rows, -100);
    } else if (label) {
      throw Unsupported(
          fmt::format("pad_on_batch_axis: label column '{}' is {}; padded rows are masked out through "
                      "CrossEntropyLoss's ignore_index -100, which needs integer class labels",
                      name, dtype_name(t.dtype())));
    } else {
      auto* out = static_cast<char*>(padded.raw_data());
      const char* last = static_cast<const char*>(t.raw_data()) + (rows - 1) * static_cast<int64_t>(row_bytes);
      for (int64_t r = rows; r < batch_size; ++r) std::memcpy(out + r * static_cast<int64_t>(row_bytes), last, row_bytes);
    }
    column = padded;
  }
  return rows;
}

std::vector<std::string> label_columns(const TrainingArguments& args) {
  if (args.label_names && !args.label_names->empty()) return *args.label_names;
  return {"labels"};
}

Tensor first_rows(const Tensor& t, int64_t rows) {
  if (!t.defined() || t.rank() == 0 || t.dim(0) <= rows) return t;
  const Tensor c = t.is_contiguous() ? t : t.clone();
  Shape shape = c.shape();
  shape[0] = rows;
  Tensor out = Tensor::empty(c.dtype(), shape);
  std::memcpy(out.raw_data(), c.raw_data(), out.nbytes());
  return out;
}

}  // namespace kiln::trainer
