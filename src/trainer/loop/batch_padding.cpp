#include "trainer/loop/batch_padding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

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
      for (int64_t r = rows; r < batch_size; ++r)
        std::memcpy(out + r * static_cast<int64_t>(row_bytes), last, row_bytes);
    }
    column = padded;
  }
  return rows;
}

void check_padding_is_masked(const Model& training_model, const std::vector<std::string>& label_columns) {
  // A label value back to the column it reshapes, casts or slices (a shifted causal-LM label).
  std::map<std::string, const Node*> producer;
  for (const Node& n : training_model.graph.nodes)
    for (const auto& o : n.outputs) producer[o] = &n;
  static const std::set<std::string> moves = {"Reshape",   "Flatten",  "Cast",  "Squeeze",
                                              "Unsqueeze", "Identity", "Slice", "Transpose"};
  auto column_of = [&](std::string v) {
    for (auto it = producer.find(v); it != producer.end() && moves.count(it->second->op_type); it = producer.find(v))
      v = it->second->inputs.at(0);
    return v;
  };
  bool masked = false;
  for (const Node& n : training_model.graph.nodes) {
    if (n.op_type == "BatchNormalization")
      throw Unsupported(fmt::format(
          "pad_on_batch_axis: {} normalizes with the statistics of the whole batch, so padded rows would change "
          "the real rows' results; train this model without padding (dataloader_drop_last, or a short last batch)",
          n.label()));
    const bool loss = n.op_type == "SoftmaxCrossEntropyLoss" || n.op_type == "NegativeLogLikelihoodLoss";
    if (loss && n.inputs.size() > 1 && n.attr_int("ignore_index", 0) == -100 &&
        std::find(label_columns.begin(), label_columns.end(), column_of(n.inputs[1])) != label_columns.end())
      masked = true;
  }
  if (!masked)
    throw Unsupported(fmt::format(
        "pad_on_batch_axis: padded rows are masked through CrossEntropyLoss's ignore_index -100 on the label column "
        "({}), and this training model has no such loss",
        fmt::join(label_columns, ", ")));
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
