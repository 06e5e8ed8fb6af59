#include "autodiff/gradient_checker.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/autodiff.h"
#include "kiln/kernel.h"
#include "kiln/session.h"

namespace kiln::testing {

Tensor random_tensor(Shape shape, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty(DType::Float64, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = dist(rng);
  return t;
}

namespace {

Tensor cast_to(const Tensor& t, DType to) {
  if (t.dtype() == to || !is_floating(t.dtype())) return t;
  Tensor out = Tensor::empty(to, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (to == DType::Float32) out.data<float>()[i] = static_cast<float>(t.item_as_double(i));
    else out.data<double>()[i] = t.item_as_double(i);
  }
  return out;
}

// node(x...) -> y...; loss = sum_j ReduceSum(y_j * r_j) over float outputs.
Model make_model(const GradCheck& c, const std::vector<Tensor>& inputs, const std::vector<Tensor>& projections,
                 bool inputs_as_initializers) {
  Model m;
  m.opsets = {{"", c.opset}};
  if (!c.node.domain.empty()) m.opsets[c.node.domain] = 1;  // Kiln's own ops are at version 1
  Node n = c.node;
  n.name = "under_test";
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty()) continue;
    n.inputs[i] = fmt::format("x{}", i);
    const bool param = std::find(c.wrt.begin(), c.wrt.end(), i) != c.wrt.end();
    if (inputs_as_initializers || !param) m.graph.initializers[n.inputs[i]] = inputs[i];
    else m.graph.inputs.push_back(ValueInfo::of(n.inputs[i], inputs[i]));
  }
  for (size_t j = 0; j < n.outputs.size(); ++j) n.outputs[j] = fmt::format("y{}", j);
  m.graph.nodes.push_back(n);
  std::vector<std::string> terms;
  for (size_t j = 0; j < projections.size(); ++j) {
    if (!projections[j].defined()) continue;
    const std::string r = fmt::format("r{}", j);
    m.graph.initializers[r] = projections[j];
    Node mul;
    mul.op_type = "Mul";
    mul.name = fmt::format("project{}", j);
    mul.inputs = {fmt::format("y{}", j), r};
    mul.outputs = {fmt::format("p{}", j)};
    Node sum;
    sum.op_type = "ReduceSum";
    sum.name = fmt::format("sum{}", j);
    sum.inputs = {mul.outputs[0]};
    sum.attrs["keepdims"] = Attribute::of_int(0);
    sum.outputs = {fmt::format("s{}", j)};
    m.graph.nodes.push_back(mul);
    m.graph.nodes.push_back(sum);
    terms.push_back(sum.outputs[0]);
  }
  Node total;
  total.op_type = "Sum";
  total.name = "loss_sum";
  total.inputs = terms;
  total.outputs = {"loss"};
  m.graph.nodes.push_back(total);
  ValueInfo loss;
  loss.name = "loss";
  loss.dtype = projections[0].defined() ? projections[0].dtype() : DType::Float64;
  loss.has_type = loss.has_shape = true;
  m.graph.outputs = {loss};
  return m;
}

}  // namespace

double check_gradient(const GradCheck& c) {
  const std::string where = fmt::format("{} (seed {}, {})", c.node.op_type, c.seed, c.float32 ? "float32" : "float64");
  SCOPED_TRACE(where);
  const DType ft = c.float32 ? DType::Float32 : DType::Float64;
  std::vector<Tensor> inputs64 = c.inputs, inputs_ft;
  for (const Tensor& t : c.inputs) inputs_ft.push_back(t.defined() ? cast_to(t, ft) : t);

  // Output shapes from one eager run; one random projection per floating output.
  const std::vector<Tensor> outs = run_node(c.node, inputs64, c.opset);
  std::vector<Tensor> proj64, proj_ft;
  for (size_t j = 0; j < outs.size() && j < c.node.outputs.size(); ++j) {
    if (c.node.outputs[j].empty() || !is_floating(outs[j].dtype())) {
      proj64.emplace_back();
      proj_ft.emplace_back();
      continue;
    }
    proj64.push_back(random_tensor(outs[j].shape(), c.seed * 7919 + j));
    proj_ft.push_back(cast_to(proj64.back(), ft));
  }

  // Analytical gradients.
  GradientOptions opts;
  opts.loss = "loss";
  for (size_t i : c.wrt) opts.requires_grad.push_back(fmt::format("x{}", i));
  GradientGraph gg = build_gradient_graph(make_model(c, inputs_ft, proj_ft, true), opts);
  Session grad_session(gg.model);
  auto grads = grad_session.run({});

  // Numerical gradients in float64.
  Session loss_session(make_model(c, inputs64, proj64, false));
  auto loss_at = [&](std::map<std::string, Tensor>& feeds) {
    return loss_session.run(feeds).at("loss").item_as_double();
  };
  double worst = 0;
  for (size_t i : c.wrt) {
    const std::string name = fmt::format("x{}", i);
    std::map<std::string, Tensor> feeds;
    for (size_t k : c.wrt) feeds[fmt::format("x{}", k)] = inputs64[k].clone();
    Tensor& x = feeds[name];
    const Tensor& analytical = grads.at(gg.grads.at(name));
    EXPECT_EQ(analytical.shape(), x.shape()) << name;
    double num = 0, den = 0;
    for (int64_t e = 0; e < x.numel(); ++e) {
      double* p = x.data<double>() + e;
      const double x0 = *p;
      const double h = 1e-6 * std::max(1.0, std::abs(x0));
      *p = x0 + h;
      const double up = loss_at(feeds);
      *p = x0 - h;
      const double down = loss_at(feeds);
      *p = x0;
      const double numeric = (up - down) / (2 * h);
      const double diff = analytical.item_as_double(e) - numeric;
      num += diff * diff;
      den += numeric * numeric;
    }
    const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-12);
    worst = std::max(worst, rel);
    const double tol = c.float32 ? 1e-3 : 1e-6;
    EXPECT_LE(rel, tol) << "gradient of input " << i << " of " << where << ": relative error " << rel;
  }
  return worst;
}

}  // namespace kiln::testing
