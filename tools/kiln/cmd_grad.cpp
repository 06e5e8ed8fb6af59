// `kiln grad MODEL.onnx --loss NAME [--requires-grad a,b] [--frozen-params c,d]
// [--mixed-precision bf16|fp16] --out TRAIN.onnx`: writes the training graph (forward + backward,
// one gradient output per parameter).
#include <fmt/format.h>

#include <memory>

#include "commands.h"
#include "kiln/artifacts.h"
#include "kiln/autodiff.h"
#include "kiln/onnx_io.h"
#include "options.h"

namespace kiln::cli {
namespace {

struct GradOptions {
  std::string model, loss, out, mixed_precision = "no";
  std::vector<std::string> requires_grad, frozen;
};

void run_grad(const GradOptions& o) {
  GradientOptions opts;
  opts.loss = o.loss;
  opts.requires_grad = split_list(o.requires_grad);
  opts.frozen_params = split_list(o.frozen);
  opts.mixed_precision = training::mixed_precision_from_string(o.mixed_precision);
  const GradientGraph g = build_gradient_graph(load_model(o.model), opts);
  save_model(g.model, o.out);
  fmt::print("wrote {}: {} nodes, loss '{}', gradients of {} parameters\n", o.out, g.model.graph.nodes.size(), o.loss,
             g.parameters.size());
  for (const auto& p : g.parameters) fmt::print("  {} -> {}\n", p, g.grads.at(p));
}

Action setup(CLI::App& app) {
  auto o = std::make_shared<GradOptions>();
  app.add_option("model", o->model, "The forward ONNX model (it computes the loss)")->required();
  app.add_option("--loss", o->loss, "Name of the scalar loss value")->required();
  app.add_option("--requires-grad", o->requires_grad,
                 "Parameters to differentiate (comma separated; default: every "
                 "float initializer except BatchNorm statistics)");
  app.add_option("--frozen-params", o->frozen, "Parameters to leave out (comma separated)");
  app.add_option("--mixed-precision", o->mixed_precision,
                 "bf16 or fp16: the matrix products and their gradients in 16 bits (no loss scaling); no: float32")
      ->capture_default_str();
  app.add_option("--out", o->out, "Where to write the training graph")->required();
  return [o] { run_grad(*o); };
}

const CommandRegistrar reg({"grad", "Build a model's training graph (forward + backward) and write it as ONNX", setup});

}  // namespace
}  // namespace kiln::cli
