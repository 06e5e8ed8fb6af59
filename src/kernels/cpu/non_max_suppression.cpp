// NonMaxSuppression (opset 10+): per batch and class, boxes taken in decreasing score order (ties:
// lower index first) above score_threshold, each kept unless its IoU with a kept box exceeds
// iou_threshold, at most max_output_boxes_per_class of them. Boxes are [y1, x1, y2, x2] corners in
// either order (center_point_box 0) or [x_center, y_center, width, height] (1). The output
// [selected, 3] (batch, class, box) has a data-dependent length: infer() runs the selection.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <numeric>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using Box = std::array<double, 4>;  // y1, x1, y2, x2 with y1 <= y2, x1 <= x2

Box corners(const double* b, bool center) {
  if (center) {
    const double xc = b[0], yc = b[1], w = b[2] / 2, h = b[3] / 2;
    return {yc - h, xc - w, yc + h, xc + w};
  }
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

// IoU(a, b) > threshold; boxes without area never suppress.
bool suppresses(const Box& a, const Box& b, double threshold) {
  const double ih = std::min(a[2], b[2]) - std::max(a[0], b[0]), iw = std::min(a[3], b[3]) - std::max(a[1], b[1]);
  if (ih <= 0 || iw <= 0) return false;
  const double area_a = (a[2] - a[0]) * (a[3] - a[1]), area_b = (b[2] - b[0]) * (b[3] - b[1]);
  const double inter = ih * iw, uni = area_a + area_b - inter;
  if (area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return inter / uni > threshold;
}

double scalar_or(const Tensor* t, size_t i, double fallback) {
  if (!t) return fallback;
  if (t->numel() != 1)
    throw ShapeError(fmt::format("NonMaxSuppression: input {} {} must hold one value", i, t->describe()));
  return t->item_as_double();
}

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.item_as_double(i);
  return v;
}

// The selected (batch, class, box) triples; `in` holds the five inputs (null: omitted).
std::vector<int64_t> select(const std::array<const Tensor*, 5>& in, bool center) {
  const auto max_out = static_cast<int64_t>(scalar_or(in[2], 2, 0));
  const double iou = scalar_or(in[3], 3, 0), min_score = scalar_or(in[4], 4, 0);
  if (iou < 0 || iou > 1)
    throw InvalidModel(fmt::format("NonMaxSuppression: iou_threshold = {} must be in [0, 1]", iou));
  const std::vector<double> b = as_doubles(*in[0]), s = as_doubles(*in[1]);
  const int64_t batches = in[0]->dim(0), n = in[0]->dim(1), classes = in[1]->dim(1);
  std::vector<int64_t> selected;
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t c = 0; c < classes; ++c) {
      const double* sc = s.data() + (bi * classes + c) * n;
      std::vector<int64_t> order;
      for (int64_t i = 0; i < n; ++i)
        if (!in[4] || sc[i] > min_score) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return sc[x] > sc[y]; });
      std::vector<Box> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        const Box box = corners(b.data() + (bi * n + i) * 4, center);
        if (std::none_of(kept.begin(), kept.end(), [&](const Box& k) { return suppresses(box, k, iou); })) {
          kept.push_back(box);
          selected.insert(selected.end(), {bi, c, i});
        }
      }
    }
  return selected;
}

class NonMaxSuppressionKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta &boxes = ctx.input(0), &scores = ctx.input(1);
    if (boxes.shape.size() != 3 || boxes.shape[2] != 4 || scores.shape.size() != 3 ||
        scores.shape[0] != boxes.shape[0] || scores.shape[2] != boxes.shape[1])
      throw ShapeError(
          fmt::format("NonMaxSuppression: boxes {} must be [batch, boxes, 4] and scores {} [batch, "
                      "classes, boxes]",
                      boxes.describe(), scores.describe()));
    const int64_t center = node_.attr_int("center_point_box", 0);
    if (center != 0 && center != 1)
      throw InvalidModel(fmt::format("NonMaxSuppression: center_point_box = {} must be 0 or 1", center));
    center_ = center == 1;
    std::array<const Tensor*, 5> in{};
    for (size_t i = 0; i < in.size(); ++i) in[i] = ctx.has_input(i) ? &ctx.value(i) : nullptr;
    const std::vector<int64_t> selected = select(in, center_);
    return {TensorMeta{DType::Int64, {static_cast<int64_t>(selected.size() / 3), 3}, false, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    std::array<const Tensor*, 5> in{};
    for (size_t i = 0; i < in.size(); ++i) in[i] = ctx.has_input(i) ? &ctx.input(i) : nullptr;
    const std::vector<int64_t> selected = select(in, center_);
    Tensor& out = ctx.output(0);
    if (out.numel() != static_cast<int64_t>(selected.size()))
      throw Error(fmt::format("NonMaxSuppression: {} boxes selected but the output was planned for {}",
                              selected.size() / 3, out.dim(0)));
    std::copy(selected.begin(), selected.end(), out.data<int64_t>());
  }

 private:
  bool center_ = false;
};

const KernelRegistrar nms_reg({"", "NonMaxSuppression", 10, kMaxOpset, {DType::Float32, DType::Float64}},
                              [](const Node& n) { return std::make_unique<NonMaxSuppressionKernel>(n); });

}  // namespace
}  // namespace kiln
