#include "attention_ops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace kiln::nn::attn {

namespace {

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

}  // namespace

std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                      const std::string& what) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == 1 || db == 1) {
      out[i] = da == 1 ? db : da;
    } else if (da == -1 || db == -1) {
      out[i] = da == -1 ? db : da;  // the known one, if any: the run must agree with it
    } else if (da != db) {
      throw ShapeError(fmt::format("{}: shapes {} and {} do not broadcast", what, shape_str(a), shape_str(b)));
    } else {
      out[i] = da;
    }
  }
  return out;
}

Var binary(Tracer& t, const std::string& op, const Var& a, const Var& b) {
  return t.op(op, {a, b}, {}, a.dtype, broadcast_shapes(a.shape, b.shape, t.scope() + "/" + op));
}

Var matmul(Tracer& t, const Var& a, const Var& b) {
  if (a.rank() < 2 || b.rank() < 2)
    throw ShapeError(
        fmt::format("{}/MatMul: operands {} and {} need rank >= 2", t.scope(), shape_str(a.shape), shape_str(b.shape)));
  const int64_t ka = a.dim(-1), kb = b.dim(-2);
  if (ka != -1 && kb != -1 && ka != kb)
    throw ShapeError(fmt::format("{}/MatMul: inner dimensions of {} and {} differ", t.scope(), shape_str(a.shape),
                                 shape_str(b.shape)));
  std::vector<int64_t> batch_a(a.shape.begin(), a.shape.end() - 2), batch_b(b.shape.begin(), b.shape.end() - 2);
  std::vector<int64_t> shape = broadcast_shapes(batch_a, batch_b, t.scope() + "/MatMul");
  shape.push_back(a.dim(-2));
  shape.push_back(b.dim(-1));
  return t.op("MatMul", {a, b}, {}, a.dtype, shape);
}

Var transpose(Tracer& t, const Var& x, const std::vector<int64_t>& perm) {
  std::vector<int64_t> shape;
  shape.reserve(perm.size());
  for (int64_t p : perm) shape.push_back(x.shape.at(static_cast<size_t>(p)));
  return t.op("Transpose", {x}, {{"perm", Attribute::of_ints(perm)}}, x.dtype, shape);
}

Var reshape(Tracer& t, const Var& x, const std::vector<int64_t>& target) {
  std::vector<int64_t> shape(target.size());
  int64_t known = 1;  // product of the output dims known at trace time, to infer a -1
  bool all_known = true;
  int64_t infer_at = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    shape[i] = target[i] == 0 ? x.shape.at(i) : target[i];
    if (target[i] == -1) infer_at = static_cast<int64_t>(i);
    else if (shape[i] == -1) all_known = false;
    else known *= shape[i];
  }
  if (infer_at >= 0) {
    int64_t total = 1;
    for (int64_t d : x.shape) {
      if (d == -1) all_known = false;
      total *= d;
    }
    shape[static_cast<size_t>(infer_at)] = all_known && known != 0 ? total / known : -1;
  }
  return t.op("Reshape", {x, t.constant_ints(target)}, {}, x.dtype, shape);
}

Var unsqueeze(Tracer& t, const Var& x, const std::vector<int64_t>& axes) {
  std::vector<int64_t> shape = x.shape;
  for (int64_t a : axes) shape.insert(shape.begin() + a, 1);
  return t.op("Unsqueeze", {x, t.constant_ints(axes, "axes")}, {}, x.dtype, shape);
}

Var squeeze(Tracer& t, const Var& x, const std::vector<int64_t>& axes) {
  std::vector<int64_t> shape;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) shape.push_back(x.shape[static_cast<size_t>(i)]);
  return t.op("Squeeze", {x, t.constant_ints(axes, "axes")}, {}, x.dtype, shape);
}

Var where(Tracer& t, const Var& cond, const Var& a, const Var& b) {
  const std::string what = t.scope() + "/Where";
  return t.op("Where", {cond, a, b}, {}, a.dtype,
              broadcast_shapes(cond.shape, broadcast_shapes(a.shape, b.shape, what), what));
}

Var gelu(Tracer& t, const Var& x) {
  const Var scaled = binary(t, "Mul", x, t.constant_scalar(std::sqrt(0.5), x.dtype, "sqrt_half"));
  const Var erf = t.op("Erf", {scaled}, {}, x.dtype, x.shape);
  const Var one_plus = binary(t, "Add", erf, t.constant_scalar(1.0, x.dtype, "one"));
  const Var half_x = binary(t, "Mul", x, t.constant_scalar(0.5, x.dtype, "half"));
  return binary(t, "Mul", half_x, one_plus);
}

Var relu(Tracer& t, const Var& x) { return t.op("Relu", {x}, {}, x.dtype, x.shape); }

}  // namespace kiln::nn::attn
