// `kiln inspect MODEL.onnx [--json]`: what a model takes and gives, what it is made of, and which of
// its ops Kiln cannot run.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "commands.h"
#include "kiln/autodiff.h"
#include "kiln/kernel.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "options.h"

namespace kiln::cli {
namespace {

using nlohmann::json;

struct InspectOptions {
  std::string model;
  bool json = false;
  bool training = false;
  bool gradient_checkpointing = false;
  std::string loss;
  std::vector<std::string> dims;
};

std::string domain_label(const std::string& domain) { return domain.empty() ? "ai.onnx" : domain; }

// "Conv" for the default domain, "com.example:Frobnicate" elsewhere.
std::string op_label(const std::string& domain, const std::string& op) {
  return domain.empty() ? op : domain + ":" + op;
}

struct Summary {
  std::map<std::string, int64_t> op_counts;           // by op_label
  std::set<std::pair<std::string, std::string>> ops;  // (domain, op_type)
  int64_t num_nodes = 0;
  int64_t num_parameters = 0;
  int64_t parameter_bytes = 0;
  int64_t num_initializers = 0;
  std::vector<json> unsupported;
};

// Counts nodes of the graph and of every subgraph (If/Loop/Scan bodies), and their initializers.
void count_graph(const Graph& g, Summary& s) {
  for (const Node& n : g.nodes) {
    ++s.num_nodes;
    ++s.op_counts[op_label(n.domain, n.op_type)];
    s.ops.insert({n.domain, n.op_type});
    for (const auto& [key, attr] : n.attrs)
      if (attr.kind == Attribute::Kind::Graph && attr.g) count_graph(*attr.g, s);
  }
  for (const auto& [name, t] : g.initializers) {
    ++s.num_initializers;
    s.num_parameters += t.numel();
    s.parameter_bytes += static_cast<int64_t>(t.nbytes());
  }
}

Summary summarize(const Model& m) {
  Summary s;
  count_graph(m.graph, s);
  const KernelRegistry& registry = KernelRegistry::global();
  for (const auto& [domain, op] : s.ops) {
    const int64_t opset = m.opset(domain);
    if (!registry.has_op(domain, op, opset))
      s.unsupported.push_back({{"op", op}, {"domain", domain_label(domain)}, {"opset", opset}});
  }
  return s;
}

json shape_json(const ValueInfo& v) {
  if (!v.has_shape) return nullptr;
  json dims = json::array();
  for (const Dim& d : v.dims) {
    if (d.value >= 0) dims.push_back(d.value);
    else if (!d.param.empty()) dims.push_back(d.param);
    else dims.push_back(nullptr);
  }
  return dims;
}

json values_json(const std::vector<ValueInfo>& values) {
  json out = json::array();
  for (const ValueInfo& v : values)
    out.push_back({{"name", v.name},
                   {"dtype", v.has_type ? json(dtype_name(v.dtype)) : json(nullptr)},
                   {"shape", shape_json(v)}});
  return out;
}

json to_json(const InspectOptions& o, const Model& m, const Summary& s) {
  json opsets = json::object();
  for (const auto& [domain, version] : m.opsets) opsets[domain_label(domain)] = version;
  return {
      {"model", o.model},
      {"ir_version", m.ir_version},
      {"producer", {{"name", m.producer_name}, {"version", m.producer_version}}},
      {"opsets", opsets},
      {"inputs", values_json(m.graph.inputs)},
      {"outputs", values_json(m.graph.outputs)},
      {"num_nodes", s.num_nodes},
      {"op_counts", s.op_counts},
      {"parameters", {{"count", s.num_parameters}, {"bytes", s.parameter_bytes}, {"initializers", s.num_initializers}}},
      {"unsupported_ops", s.unsupported},
      {"all_ops_supported", s.unsupported.empty()}};
}

void print_text(const InspectOptions& o, const Model& m, const Summary& s) {
  std::cout << fmt::format("model: {}\n", o.model);
  std::cout << fmt::format("ir_version: {}\n", m.ir_version);
  const std::string producer = fmt::format("{} {}", m.producer_name, m.producer_version);
  std::cout << "producer: " << (m.producer_name.empty() ? "(not recorded)" : producer) << "\n";
  std::string opsets;
  for (const auto& [domain, version] : m.opsets) opsets += fmt::format(" {}={}", domain_label(domain), version);
  std::cout << "opsets:" << opsets << "\n";
  std::cout << "inputs:\n";
  for (const ValueInfo& v : m.graph.inputs) std::cout << fmt::format("  {}: {}\n", v.name, v.describe());
  std::cout << "outputs:\n";
  for (const ValueInfo& v : m.graph.outputs) std::cout << fmt::format("  {}: {}\n", v.name, v.describe());
  std::cout << fmt::format("ops: {} nodes\n", s.num_nodes);
  for (const auto& [op, count] : s.op_counts) std::cout << fmt::format("  {}: {}\n", op, count);
  std::cout << fmt::format("parameters: {} ({} bytes in {} initializers)\n", s.num_parameters, s.parameter_bytes,
                           s.num_initializers);
  if (s.unsupported.empty()) {
    std::cout << "all ops supported\n";
    return;
  }
  std::cout << "unsupported ops:\n";
  for (const json& u : s.unsupported)
    std::cout << fmt::format("  {} (domain {}, opset {})\n", u["op"].get<std::string>(), u["domain"].get<std::string>(),
                             u["opset"].get<int64_t>());
}

// Planned activation memory of the forward graph and of its training graph, at example shapes.
json plan_report(const InspectOptions& o, const Model& m) {
  const auto feeds = example_feeds(m, parse_dims(o.dims));
  std::vector<std::string> shapes;
  for (const auto& [name, t] : feeds)
    shapes.push_back(fmt::format("{}={}{}", name, dtype_name(t.dtype), kiln::to_string(t.shape)));
  Session forward(m);
  const PlanStats fwd = forward.plan_shapes(feeds);
  GradientOptions opts;
  opts.loss = o.loss;
  const GradientGraph g = build_gradient_graph(m, opts);
  Session training(g.model);
  const PlanStats train = training.plan_shapes(feeds);
  json report = {{"inputs", shapes},
                 {"forward_peak_bytes", fwd.peak_bytes},
                 {"training_peak_bytes", train.peak_bytes},
                 {"training_unplanned_bytes", train.unplanned_bytes},
                 {"training_steps", train.num_steps},
                 {"parameters_with_gradients", g.parameters.size()}};
  if (o.gradient_checkpointing) {
    opts.recompute.enabled = true;
    const GradientGraph r = build_gradient_graph(m, opts);
    Session recomputing(r.model);
    const PlanStats plan = recomputing.plan_shapes(feeds);
    report["gradient_checkpointing"] = {{"training_peak_bytes", plan.peak_bytes},
                                        {"training_steps", plan.num_steps},
                                        {"boundaries", r.recompute_boundaries},
                                        {"recomputed_nodes", r.recomputed_nodes}};
  }
  return report;
}

void inspect(const InspectOptions& o) {
  if (o.training && o.loss.empty()) throw InvalidArgument("--training needs --loss NAME (the scalar loss value)");
  if (o.gradient_checkpointing && !o.training)
    throw InvalidArgument("--gradient_checkpointing needs --training (it plans the training graph with recompute)");
  const Model m = load_model(o.model);
  const Summary s = summarize(m);
  json plan;
  if (o.training) plan = plan_report(o, m);
  if (o.json) {
    json out = to_json(o, m, s);
    if (o.training) out["training_plan"] = plan;
    std::cout << out.dump(2) << "\n";
    return;
  }
  print_text(o, m, s);
  if (!o.training) return;
  const auto mib = [](const json& v) { return v.get<double>() / 1048576.0; };
  std::cout << fmt::format("training plan (loss '{}', inputs {}):\n", o.loss,
                           fmt::join(plan["inputs"].get<std::vector<std::string>>(), ", "));
  std::cout << fmt::format("  forward peak activation memory:  {:.3f} MiB\n", mib(plan["forward_peak_bytes"]));
  std::cout << fmt::format(
      "  training peak activation memory: {:.3f} MiB ({:.3f} MiB without reuse), {} steps, "
      "{} parameters with gradients\n",
      mib(plan["training_peak_bytes"]), mib(plan["training_unplanned_bytes"]), plan["training_steps"].get<int64_t>(),
      plan["parameters_with_gradients"].get<int64_t>());
  if (!plan.contains("gradient_checkpointing")) return;
  const json& r = plan["gradient_checkpointing"];
  std::cout << fmt::format(
      "  with gradient checkpointing:     {:.3f} MiB ({:.1f}% less), {} steps, {} forward nodes recomputed "
      "between {} kept values\n",
      mib(r["training_peak_bytes"]),
      100.0 * (1.0 - r["training_peak_bytes"].get<double>() / std::max(1.0, plan["training_peak_bytes"].get<double>())),
      r["training_steps"].get<int64_t>(), r["recomputed_nodes"].get<int64_t>(), r["boundaries"].size());
}

Action setup(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  app.add_option("model", o->model, "The ONNX model file")->required();
  app.add_flag("--json", o->json, "Print the summary as JSON");
  app.add_flag("--training", o->training, "Also plan the training graph and report its peak activation memory");
  app.add_option("--loss", o->loss, "With --training: the scalar loss value");
  app.add_flag("--gradient_checkpointing,--gradient-checkpointing", o->gradient_checkpointing,
               "With --training: also plan the training graph with gradient checkpointing (recompute)");
  app.add_option("--dim", o->dims, "With --training: sizes of symbolic dims, e.g. batch=32 (default 1)");
  return [o] { inspect(*o); };
}

const CommandRegistrar reg({"inspect",
                            "Show a model's inputs, outputs, ops and parameters, and the ops Kiln cannot run", setup});

}  // namespace
}  // namespace kiln::cli
