// Flatten and Identity.
#include <fmt/format.h>

#include "kiln/nn/layers.h"
#include "models/nn/layer_util.h"

namespace kiln::nn {

using detail::shape_text;

namespace {

int64_t normalize_dim(const Var& x, int64_t dim, const char* what) {
  const int64_t r = x.rank();
  if (dim < -r || dim >= r)
    throw ShapeError(
        fmt::format("Flatten: {} {} is out of range for input '{}' {} (expected to be in range of [{}, {}])", what, dim,
                    x.name, shape_text(x.shape), -r, r - 1));
  return dim < 0 ? dim + r : dim;
}

// The target shape as a run-time value: Shape(x) sliced around the merged dims, whose product
// ReduceProd computes. Used when the target has more than one dimension unknown at export time.
Var dynamic_target(Tracer& t, const Var& x, int64_t start, int64_t end) {
  const Var shape = t.op("Shape", {x}, {}, DType::Int64, {x.rank()});
  auto slice = [&](int64_t b, int64_t e) {
    return t.op("Slice",
                {shape, t.constant_ints({b}, "starts"), t.constant_ints({e}, "ends"), t.constant_ints({0}, "axes")}, {},
                DType::Int64, {e - b});
  };
  std::vector<Var> parts;
  if (start > 0) parts.push_back(slice(0, start));
  parts.push_back(t.op("ReduceProd", {slice(start, end + 1)},
                       {{"axes", detail::ints({0})}, {"keepdims", Attribute::of_int(1)}}, DType::Int64, {1}));
  if (end + 1 < x.rank()) parts.push_back(slice(end + 1, x.rank()));
  const int64_t n = start + 1 + (x.rank() - end - 1);
  return t.op("Concat", parts, {{"axis", Attribute::of_int(0)}}, DType::Int64, {n});
}

}  // namespace

std::vector<Var> Flatten::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& x = detail::single_input(*this, inputs);
  // torch flattens a 0-d tensor to 1-d; ONNX's Reshape does the same with target [1].
  if (x.rank() == 0) return {t.op("Reshape", {x, t.constant_ints({1}, "shape")}, {}, x.dtype, {1})};
  const int64_t start = normalize_dim(x, start_dim_, "start_dim"), end = normalize_dim(x, end_dim_, "end_dim");
  if (start > end)
    throw InvalidArgument(
        fmt::format("Flatten: flatten() has invalid args: start_dim cannot come after end_dim "
                    "(start_dim={}, end_dim={} for input '{}' {})",
                    start_dim_, end_dim_, x.name, shape_text(x.shape)));
  if (start == end) return {t.op("Identity", {x}, {}, x.dtype, x.shape)};  // torch returns the input as is
  int64_t merged = 1;
  for (int64_t i = start; i <= end; ++i)
    merged = x.shape[size_t(i)] < 0 || merged < 0 ? -1 : merged * x.shape[size_t(i)];
  std::vector<int64_t> out(x.shape.begin(), x.shape.begin() + start);
  out.push_back(merged);
  out.insert(out.end(), x.shape.begin() + end + 1, x.shape.end());
  if (start == 1 && end == x.rank() - 1) return {t.op("Flatten", {x}, {{"axis", Attribute::of_int(1)}}, x.dtype, out)};

  // Reshape: leading dims copied (0), the merged and trailing dims as numbers, at most one -1.
  std::vector<int64_t> target(size_t(start), 0);
  target.insert(target.end(), out.begin() + start, out.end());
  int64_t unknown = 0;
  for (size_t i = size_t(start); i < target.size(); ++i) unknown += target[i] < 0;
  const Var shape = unknown <= 1 ? t.constant_ints(target, "shape") : dynamic_target(t, x, start, end);
  return {t.op("Reshape", {x, shape}, {}, x.dtype, out)};
}

std::string Flatten::extra_repr() const { return fmt::format("start_dim={}, end_dim={}", start_dim_, end_dim_); }

std::vector<Var> Identity::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& x = detail::single_input(*this, inputs);
  return {t.op("Identity", {x}, {}, x.dtype, x.shape)};
}

}  // namespace kiln::nn
