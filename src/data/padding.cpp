// Dynamic padding: the batches of items whose token sequences differ in length, padded to the
// batch's longest as Hugging Face's DataCollatorWithPadding / DataCollatorForSeq2Seq do.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "kiln/data.h"

namespace kiln::data {
namespace {

double pad_value(const PaddingOptions& o, const std::string& column) {
  if (const auto it = o.pad_values.find(column); it != o.pad_values.end()) return it->second;
  if (column == "labels") return static_cast<double>(o.label_pad_token_id);
  if (column == "attention_mask" || column == "token_type_ids") return 0.0;
  if (column == "special_tokens_mask") return 1.0;
  return static_cast<double>(o.pad_token_id);
}

bool padded_column(const PaddingOptions& o, const std::string& column, const Tensor& first) {
  if (first.rank() == 0) return false;
  return o.columns.empty() || std::find(o.columns.begin(), o.columns.end(), column) != o.columns.end();
}

Tensor filled(DType dtype, Shape shape, double value) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = from_double<T>(value);
    std::fill(t.data<T>(), t.data<T>() + t.numel(), v);
  });
  return t;
}

// Writes item `t` (shape [L, ...rest]) into rows [offset, offset + L) of slot `i` of `out`
// ([B, max, ...rest]), the rest of the slot already holding the pad value.
void place(Tensor& out, size_t i, const Tensor& t, int64_t offset) {
  const size_t row_bytes = t.dim(0) == 0 ? 0 : t.nbytes() / static_cast<size_t>(t.dim(0));
  const size_t slot_bytes = out.nbytes() / static_cast<size_t>(out.dim(0));
  auto* dst = static_cast<unsigned char*>(out.raw_data()) + i * slot_bytes + static_cast<size_t>(offset) * row_bytes;
  const Tensor packed = t.contiguous();
  if (t.nbytes() > 0) std::memcpy(dst, packed.raw_data(), t.nbytes());
}

Tensor pad_column(const std::vector<Example>& items, const std::string& name, const PaddingOptions& o) {
  const Tensor& proto = items.front().at(name);
  int64_t longest = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto it = items[i].find(name);
    if (it == items[i].end())
      throw ShapeError(fmt::format("padding collator: item {} lacks column '{}' that item 0 has", i, name));
    const Tensor& t = it->second;
    if (t.dtype() != proto.dtype())
      throw TypeError(fmt::format("padding collator: column '{}' is {} in item {} but {} in item 0", name,
                                  dtype_name(t.dtype()), i, dtype_name(proto.dtype())));
    if (t.rank() != proto.rank() || !std::equal(t.shape().begin() + 1, t.shape().end(), proto.shape().begin() + 1))
      throw ShapeError(
          fmt::format("padding collator: column '{}' has shape {} in item {} but {} in item 0; only the first "
                      "dimension may differ",
                      name, to_string(t.shape()), i, to_string(proto.shape())));
    longest = std::max(longest, t.dim(0));
  }
  if (o.pad_to_multiple_of > 1)
    longest = (longest + o.pad_to_multiple_of - 1) / o.pad_to_multiple_of * o.pad_to_multiple_of;
  Shape shape{static_cast<int64_t>(items.size()), longest};
  shape.insert(shape.end(), proto.shape().begin() + 1, proto.shape().end());
  Tensor out = filled(proto.dtype(), shape, pad_value(o, name));
  const bool left = o.padding_side == "left";
  for (size_t i = 0; i < items.size(); ++i) {
    const Tensor& t = items[i].at(name);
    place(out, i, t, left ? longest - t.dim(0) : 0);
  }
  return out;
}

// The attention mask a tokenizer's pad adds: 1 over each item's input_ids, 0 over the padding.
Tensor attention_mask(const std::vector<Example>& items, const Tensor& input_ids, bool left) {
  const int64_t longest = input_ids.dim(1);
  Tensor mask = filled(DType::Int64, {static_cast<int64_t>(items.size()), longest}, 0.0);
  auto* m = mask.data<int64_t>();
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t len = items[i].at("input_ids").dim(0);
    const int64_t from = left ? longest - len : 0;
    std::fill(m + static_cast<int64_t>(i) * longest + from, m + static_cast<int64_t>(i) * longest + from + len, 1);
  }
  return mask;
}

}  // namespace

Collator padding_collator(PaddingOptions options) {
  if (options.padding_side != "right" && options.padding_side != "left")
    throw InvalidArgument(fmt::format("padding_side must be 'right' or 'left', not '{}'", options.padding_side));
  if (options.pad_to_multiple_of < 0)
    throw InvalidArgument(fmt::format("pad_to_multiple_of {} is negative", options.pad_to_multiple_of));
  return [o = std::move(options)](const std::vector<Example>& items) {
    if (items.empty()) throw InvalidArgument("padding collator: no items to collate");
    std::vector<Example> rest(items.size());
    Example batch;
    for (const auto& [name, proto] : items.front()) {
      if (!proto.defined())
        throw InvalidArgument(fmt::format("padding collator: column '{}' of item 0 is undefined", name));
      if (padded_column(o, name, proto)) batch[name] = pad_column(items, name, o);
      else
        for (size_t i = 0; i < items.size(); ++i) {
          const auto it = items[i].find(name);
          if (it == items[i].end())
            throw ShapeError(fmt::format("padding collator: item {} lacks column '{}' that item 0 has", i, name));
          rest[i][name] = it->second;
        }
    }
    for (size_t i = 1; i < items.size(); ++i)
      if (items[i].size() != items.front().size())
        throw ShapeError(fmt::format("padding collator: item {} has {} columns, item 0 has {}", i, items[i].size(),
                                     items.front().size()));
    if (!rest.front().empty()) batch.merge(default_collate(rest));
    const auto ids = batch.find("input_ids");
    if (o.add_attention_mask && ids != batch.end() && ids->second.rank() == 2 && !batch.count("attention_mask"))
      batch["attention_mask"] = attention_mask(items, ids->second, o.padding_side == "left");
    return batch;
  };
}

}  // namespace kiln::data
