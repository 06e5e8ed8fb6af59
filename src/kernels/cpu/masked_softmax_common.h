// What ai.kiln.MaskedSoftmax (softmax_fused.cpp) and its gradient (softmax_grad.cpp) share: the
// fused node's attributes and its rows. Y = softmax over the last axis of Z, where Z = fill where
// the mask selects it (cond == fill_where) and scale * X elsewhere; X and cond broadcast to Y's shape.
#pragma once

#include <fmt/format.h>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::masked_softmax {

struct Attrs {
  double scale = 1, fill = 0;
  bool fill_where = true;  // the fill goes where cond is true (Where(cond, fill, X)), else where false
};

inline Attrs attrs_of(const Node& n) {
  return {n.attr_float("scale", 1.f), n.attr_float("fill", 0.f), n.attr_int("fill_where", 1) != 0};
}

// Rows of `len` elements along Y's last axis, with X's and cond's offsets for each row (operands
// broadcast to Y's shape: element strides 0 along the dims they repeat).
class Rows {
 public:
  Rows() = default;
  Rows(const Shape& out, const Shape& x, const Shape& cond)
      : out_(out), x_(strides_in(out, x)), c_(strides_in(out, cond)) {
    len_ = out.empty() ? 1 : out.back();
    rows_ = len_ == 0 ? 0 : numel(out) / len_;
  }
  int64_t len() const { return len_; }
  int64_t rows() const { return rows_; }
  int64_t x_step() const { return out_.empty() ? 0 : x_.back(); }  // along a row: 0 or 1
  int64_t cond_step() const { return out_.empty() ? 0 : c_.back(); }
  int64_t x_offset(int64_t row) const { return offset(x_, row); }
  int64_t cond_offset(int64_t row) const { return offset(c_, row); }

 private:
  static Strides strides_in(const Shape& out, const Shape& in) {
    Strides s(out.size(), 0);
    const Strides own = contiguous_strides(in);
    const size_t lead = out.size() - in.size();
    for (size_t i = 0; i < in.size(); ++i) s[lead + i] = in[i] == 1 ? 0 : own[i];
    return s;
  }
  int64_t offset(const Strides& st, int64_t row) const {
    int64_t off = 0;
    for (int64_t d = static_cast<int64_t>(out_.size()) - 2; d >= 0; --d) {
      const int64_t n = out_[static_cast<size_t>(d)];
      off += (row % n) * st[static_cast<size_t>(d)];
      row /= n;
    }
    return off;
  }
  Shape out_;
  Strides x_, c_;
  int64_t len_ = 1, rows_ = 0;
};

// Y's shape, after checking the operands: X float, cond bool, broadcastable.
inline Shape output_shape(const char* op, const TensorMeta& x, const TensorMeta& cond) {
  if (x.dtype != DType::Float32 && x.dtype != DType::Float64)
    throw TypeError(
        fmt::format("{}: X must be float32 or float64, got {}{}", op, dtype_name(x.dtype), to_string(x.shape)));
  if (cond.dtype != DType::Bool)
    throw TypeError(fmt::format("{}: cond must be bool, got {}{}", op, dtype_name(cond.dtype), to_string(cond.shape)));
  return broadcast_shapes(x.shape, cond.shape);
}

}  // namespace kiln::masked_softmax
