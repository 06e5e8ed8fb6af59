// What ai.kiln.LinearCrossEntropy (linear_loss_fused.cpp) and its gradient (linear_loss_grad.cpp)
// share: the attributes, the shape checks, and the product of the rows with one chunk of the
// vocabulary. The logits of a language-model head, X W^T over a vocabulary of V classes, are
// computed `chunks` column blocks at a time into one R x ceil(V / chunks) buffer, so that the R x V
// matrix (and its gradient) never exists whole.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::linear_loss {

struct Attrs {
  int64_t chunks = 1;
  bool trans_b = true;  // W is [V, d] (a tied embedding); else [d, V]
  bool has_ignore = false;
  int64_t ignore_index = 0;
  bool mean = true;  // reduction "mean" (over the rows not ignored), else "sum"
};

inline Attrs attrs_of(const Node& n, const char* op) {
  Attrs a;
  a.chunks = n.attr_int("chunks", 1);
  if (a.chunks < 1) throw InvalidArgument(fmt::format("{}: chunks = {} must be >= 1", op, a.chunks));
  a.trans_b = n.attr_int("trans_b", 1) != 0;
  a.has_ignore = n.attrs.count("ignore_index") > 0;
  a.ignore_index = n.attr_int("ignore_index", 0);
  const std::string reduction = n.attr_string("reduction", "mean");
  if (reduction != "mean" && reduction != "sum")
    throw InvalidArgument(fmt::format("{}: reduction '{}' must be 'mean' or 'sum'", op, reduction));
  a.mean = reduction == "mean";
  return a;
}

// The sizes of a (X, W, labels) triple: R rows of d features, V classes.
struct Geometry {
  int64_t rows = 0, features = 0, classes = 0;
  int64_t chunks = 1;
  int64_t chunk() const { return (classes + chunks - 1) / chunks; }  // a block's width
};

// X [..., d], W [V, d] (trans_b) or [d, V], labels int32/int64 of X's shape less its last axis.
inline Geometry check(const InferContext& ctx, size_t x, const Attrs& a, const char* op) {
  const TensorMeta& xm = ctx.input(x);
  const TensorMeta& wm = ctx.input(x + 1);
  const TensorMeta& lm = ctx.input(x + 2);
  if (xm.dtype != DType::Float32 && xm.dtype != DType::Float64)
    throw TypeError(fmt::format("{}: X must be float32 or float64, got {}", op, dtype_name(xm.dtype)));
  if (wm.dtype != xm.dtype)
    throw TypeError(fmt::format("{}: W is {} but X is {}", op, dtype_name(wm.dtype), dtype_name(xm.dtype)));
  if (lm.dtype != DType::Int64 && lm.dtype != DType::Int32)
    throw TypeError(fmt::format("{}: the labels must be int32 or int64, got {}", op, dtype_name(lm.dtype)));
  if (xm.shape.empty() || wm.shape.size() != 2)
    throw ShapeError(fmt::format("{}: X must have rank >= 1 and W rank 2, got X {} and W {}", op, to_string(xm.shape),
                                 to_string(wm.shape)));
  Geometry g;
  g.features = xm.shape.back();
  g.classes = a.trans_b ? wm.shape[0] : wm.shape[1];
  const int64_t wd = a.trans_b ? wm.shape[1] : wm.shape[0];
  if (wd != g.features)
    throw ShapeError(fmt::format("{}: X {} has {} features but W {} (trans_b={}) has {}", op, to_string(xm.shape),
                                 g.features, to_string(wm.shape), a.trans_b ? 1 : 0, wd));
  const Shape rows_shape(xm.shape.begin(), xm.shape.end() - 1);
  if (lm.shape != rows_shape)
    throw ShapeError(fmt::format("{}: the labels must have X's shape less its last axis, {}, got {}", op,
                                 to_string(rows_shape), to_string(lm.shape)));
  g.rows = numel(rows_shape);
  g.chunks = std::min(a.chunks, std::max<int64_t>(1, g.classes));
  return g;
}

// The label of a row as a class index, or -1 for an ignored row; InvalidArgument for one out of range.
template <class L>
int64_t class_of(const L* labels, int64_t r, const Attrs& a, const Geometry& g, const char* op) {
  const int64_t y = static_cast<int64_t>(labels[r]);
  if (a.has_ignore && y == a.ignore_index) return -1;
  if (y < 0 || y >= g.classes)
    throw InvalidArgument(fmt::format("{}: label {} of row {} is outside [0, {}){}", op, y, r, g.classes,
                                      a.has_ignore ? fmt::format(" and is not ignore_index {}", a.ignore_index) : ""));
  return y;
}

// The geometry of a run (the shapes were checked when the node was planned).
inline Geometry geometry_of(const Tensor& x, const Tensor& w, const Attrs& a) {
  Geometry g;
  g.features = x.shape().back();
  g.rows = x.numel() / std::max<int64_t>(1, g.features);
  g.classes = a.trans_b ? w.dim(0) : w.dim(1);
  g.chunks = std::min(a.chunks, std::max<int64_t>(1, g.classes));
  return g;
}

// run.template operator()<T, L>() for X's float type T and the labels' integer type L.
template <class Run>
void dispatch(DType x, DType labels, Run&& run) {
  const bool wide = labels == DType::Int64;
  if (x == DType::Float32) {
    if (wide) return run.template operator()<float, int64_t>();
    return run.template operator()<float, int32_t>();
  }
  if (wide) return run.template operator()<double, int64_t>();
  run.template operator()<double, int32_t>();
}

// Each row's class, -1 where ignored; and how many rows count.
template <class L>
int64_t row_classes(const L* labels, const Attrs& a, const Geometry& g, const char* op, std::vector<int64_t>& out) {
  out.resize(static_cast<size_t>(g.rows));
  int64_t counted = 0;
  for (int64_t r = 0; r < g.rows; ++r) counted += (out[static_cast<size_t>(r)] = class_of(labels, r, a, g, op)) >= 0;
  return counted;
}

template <class T>
void gemm(const blas::GemmShape& s, T alpha, const T* a, const T* b, T beta, T* c) {
  if constexpr (std::is_same_v<T, float>) blas::sgemm(s, alpha, a, b, beta, c);
  else blas::dgemm(s, alpha, a, b, beta, c);
}

// logits [R, w] = X [R, d] times the chunk's classes [c0, c0 + w) of W, transposed.
template <class T>
void chunk_logits(const Geometry& g, bool trans_b, const T* x, const T* w, int64_t c0, int64_t width, T* logits) {
  const int64_t d = g.features, v = g.classes;
  if (trans_b) gemm<T>({false, true, g.rows, width, d, d, d, width}, T(1), x, w + c0 * d, T(0), logits);
  else gemm<T>({false, false, g.rows, width, d, d, v, width}, T(1), x, w + c0, T(0), logits);
}

}  // namespace kiln::linear_loss
