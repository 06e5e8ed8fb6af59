// Shared pieces of the kiln::nn layers: ExpandingArray, input checks, Python-style repr text and
// the window arithmetic of convolution and pooling.
#include "models/nn/layer_util.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace kiln::nn {

template <size_t D>
ExpandingArray<D>::ExpandingArray(const std::vector<int64_t>& values) {
  if (values.size() == 1) {
    values_.fill(values[0]);
    scalar_ = true;
  } else if (values.size() == D) {
    std::copy(values.begin(), values.end(), values_.begin());
  } else {
    throw InvalidArgument(fmt::format("expected 1 or {} values (an int or a tuple of {} ints), got {}: {}", D, D,
                                      values.size(), detail::py_tuple(values)));
  }
}

template <size_t D>
bool ExpandingArray<D>::all_equal(int64_t v) const {
  return std::all_of(values_.begin(), values_.end(), [v](int64_t x) { return x == v; });
}

template <size_t D>
std::string ExpandingArray<D>::repr(bool as_given) const {
  if (as_given && scalar_) return std::to_string(values_[0]);
  return detail::py_tuple(vec());
}

template class ExpandingArray<1>;
template class ExpandingArray<2>;

namespace detail {

const Var& single_input(const Module& m, const std::vector<Var>& inputs) {
  if (inputs.size() != 1 || inputs[0].name.empty())
    throw InvalidArgument(fmt::format("{}.forward takes exactly one input, got {}", m.type_name(), inputs.size()));
  return inputs[0];
}

void require_float(const Module& m, const Var& x) {
  if (!is_floating(x.dtype))
    throw TypeError(fmt::format("{} expects a floating-point input, got '{}' {}{}", m.type_name(), x.name,
                                dtype_name(x.dtype), shape_text(x.shape)));
}

void require_dtype(const Module& m, const Var& x, const Var& param) {
  if (x.dtype != param.dtype)
    throw TypeError(fmt::format("{}: input '{}' is {}{} but its parameter '{}' is {}; convert one to the other's dtype",
                                m.type_name(), x.name, dtype_name(x.dtype), shape_text(x.shape), param.name,
                                dtype_name(param.dtype)));
}

std::string py_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);  // shortest round-trip, as Python's repr
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string py_bool(bool v) { return v ? "True" : "False"; }

std::string py_tuple(const std::vector<int64_t>& v) {
  if (v.size() == 1) return fmt::format("({},)", v[0]);
  return fmt::format("({})", fmt::join(v, ", "));
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t window_out_dim(int64_t in, int64_t kernel, int64_t stride, int64_t pad_begin, int64_t pad_end, int64_t dilation,
                       bool ceil_mode) {
  if (in < 0) return -1;
  const int64_t span = in + pad_begin + pad_end - dilation * (kernel - 1) - 1;
  if (span < 0) return 0;  // callers report the too-small input
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad_begin) --out;
  return out;
}

Var with_batch_dim(Tracer& t, const Var& x, int64_t batched_rank, const std::string& op_name,
                   const std::function<Var(const Var&)>& f) {
  if (x.rank() == batched_rank) return f(x);
  if (x.rank() != batched_rank - 1)
    throw ShapeError(
        fmt::format("Expected {}D (unbatched) or {}D (batched) input to {}, but got input '{}' of size: {}",
                    batched_rank - 1, batched_rank, op_name, x.name, shape_text(x.shape)));
  std::vector<int64_t> batched{1};
  batched.insert(batched.end(), x.shape.begin(), x.shape.end());
  const Var axes = t.constant_ints({0}, "axes");
  const Var y = f(t.op("Unsqueeze", {x, axes}, {}, x.dtype, batched));
  return t.op("Squeeze", {y, axes}, {}, y.dtype, std::vector<int64_t>(y.shape.begin() + 1, y.shape.end()));
}

std::vector<int64_t> symmetric_pads(const std::vector<int64_t>& pads) {
  std::vector<int64_t> all = pads;
  all.insert(all.end(), pads.begin(), pads.end());
  return all;
}

}  // namespace detail
}  // namespace kiln::nn
