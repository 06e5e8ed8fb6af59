// Small graphs for the runtime's tests of subgraphs, sequences and optionals: typed values, nodes
// with attributes, graph attributes and models of the default domain (opset 17).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln::test {

inline ValueInfo info(const std::string& name, DType dt, std::vector<int64_t> dims = {}, bool shaped = true) {
  ValueInfo v;
  v.name = name;
  v.dtype = dt;
  v.has_type = true;
  v.has_shape = shaped;
  for (int64_t d : dims) v.dims.push_back(Dim{d, d < 0 ? "n" : ""});
  return v;
}

inline Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                 std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.op_type = op;
  n.name = out.empty() ? op : out[0] + "_node";
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

inline Attribute graph(std::vector<Node> nodes, std::vector<ValueInfo> inputs, std::vector<ValueInfo> outputs) {
  auto g = std::make_shared<Graph>();
  g->name = "body";
  g->nodes = std::move(nodes);
  g->inputs = std::move(inputs);
  g->outputs = std::move(outputs);
  Attribute a;
  a.kind = Attribute::Kind::Graph;
  a.g = g;
  return a;
}

inline Model model(std::vector<Node> nodes, std::vector<ValueInfo> inputs, std::vector<ValueInfo> outputs) {
  Model m;
  m.opsets = {{"", 17}};
  m.graph.nodes = std::move(nodes);
  m.graph.inputs = std::move(inputs);
  m.graph.outputs = std::move(outputs);
  return m;
}

}  // namespace kiln::test
