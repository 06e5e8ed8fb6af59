// Gradient checkpointing as a rewrite of the built training graph (autodiff/recompute.h).
#include "autodiff/recompute.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ir/graph_editor.h"
#include "kiln/error.h"
#include "kiln/random.h"

namespace kiln {

namespace {

// Ops whose copies would draw other numbers than the original (Dropout's copies draw the same mask:
// kernels key them on the original's name).
bool draws_anew(const Node& n) {
  static const std::set<std::string> kRandom = {"RandomNormal",      "RandomNormalLike", "RandomUniform",
                                                "RandomUniformLike", "Bernoulli",        "Multinomial"};
  return n.domain.empty() && kRandom.count(n.op_type) != 0;
}

struct Forward {
  std::vector<size_t> order;                         // forward nodes, topologically
  std::unordered_map<std::string, size_t> position;  // forward value -> position of its producer
  std::unordered_set<std::string> dependent;         // forward values computed from a parameter
  // Values computed from a graph input (parameters included). The others are constants that a
  // Session folds once and keeps: a copy would only fold them again and keep them twice.
  std::unordered_set<std::string> runtime;
};

Forward forward_of(const Graph& g, size_t forward_nodes, const std::vector<std::string>& parameters) {
  Forward f;
  for (size_t i : g.topological_order())
    if (i < forward_nodes) f.order.push_back(i);
  f.dependent.insert(parameters.begin(), parameters.end());
  f.runtime.insert(parameters.begin(), parameters.end());
  for (const ValueInfo& v : g.inputs) f.runtime.insert(v.name);
  for (size_t p = 0; p < f.order.size(); ++p) {
    const Node& n = g.nodes[f.order[p]];
    bool from_parameter = false, from_input = draws_anew(n);
    for (const auto& in : n.inputs) {
      from_parameter = from_parameter || (!in.empty() && f.dependent.count(in));
      from_input = from_input || (!in.empty() && f.runtime.count(in));
    }
    for (const auto& out : n.outputs) {
      if (out.empty()) continue;
      f.position[out] = p;
      if (from_parameter) f.dependent.insert(out);
      if (from_input) f.runtime.insert(out);
    }
  }
  return f;
}

// Positions k after which exactly one parameter-dependent forward value is live (read by a forward
// node after k), with that value. A graph output no later forward node reads (a BatchNormalization's
// updated running statistic) is kept whole and does not count: segments never recompute it.
std::vector<std::pair<size_t, std::string>> cut_points(const Graph& g, const Forward& f) {
  const size_t count = f.order.size();
  std::unordered_map<std::string, size_t> last_use;
  for (const auto& [value, p] : f.position)
    if (f.dependent.count(value)) last_use[value] = p;
  for (size_t p = 0; p < count; ++p)
    for (const auto& in : g.nodes[f.order[p]].inputs)
      if (auto it = last_use.find(in); it != last_use.end()) it->second = std::max(it->second, p);
  // live[k]: values with producer <= k < last use; the one value when there is exactly one.
  std::vector<int64_t> delta(count + 1, 0);
  std::vector<std::pair<size_t, const std::string*>> spans;
  for (const auto& [value, end] : last_use) {
    const size_t begin = f.position.at(value);
    if (end <= begin) continue;
    ++delta[begin];
    --delta[end];
    spans.emplace_back(begin, &value);
  }
  std::vector<std::pair<size_t, std::string>> cuts;
  int64_t live = 0;
  for (size_t k = 0; k + 1 < count; ++k) {
    live += delta[k];
    if (live != 1) continue;
    for (const auto& [begin, value] : spans)
      if (begin <= k && last_use.at(*value) > k) {
        cuts.emplace_back(k, *value);
        break;
      }
  }
  return cuts;
}

using Readers = std::unordered_map<std::string, std::vector<size_t>>;

// Of the cut points, those that split the forward into segments of about sqrt(S) stashed values
// each (S: the parameter-dependent values the backward reads). Cutting at every point would keep
// every value of a chain of ops (a convolutional stem), and one segment per few points keeps the
// boundaries few while no segment's recomputed activations dwarf the rest (the sqrt(n) rule).
std::vector<std::pair<size_t, std::string>> choose_cuts(const Graph& g, const Forward& f, const Readers& readers) {
  std::vector<size_t> stashed(f.order.size(), 0);
  size_t total = 0;
  for (size_t p = 0; p < f.order.size(); ++p)
    for (const auto& out : g.nodes[f.order[p]].outputs)
      if (!out.empty() && f.dependent.count(out) && readers.count(out)) {
        ++stashed[p];
        ++total;
      }
  const auto target = static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(total))));
  std::vector<std::pair<size_t, std::string>> ends;
  size_t since = 0, next = 0;
  for (auto& [k, value] : cut_points(g, f)) {
    for (; next <= k; ++next) since += stashed[next];
    if (since < std::max<size_t>(target, 1) || (!ends.empty() && ends.back().second == value)) continue;
    ends.emplace_back(k, std::move(value));
    since = 0;
  }
  return ends;
}

// The segment ends at named boundaries: their producers' positions, in forward order.
std::vector<std::pair<size_t, std::string>> named_ends(const Forward& f, const std::vector<std::string>& boundaries) {
  std::vector<std::pair<size_t, std::string>> ends;
  for (const auto& name : boundaries) {
    const auto it = f.position.find(name);
    if (it == f.position.end())
      throw InvalidArgument(
          fmt::format("gradient checkpointing boundary '{}' is not a value the forward graph computes (values "
                      "inside chains Kiln fuses, such as an exported GELU's, are gone)",
                      name));
    ends.emplace_back(it->second, name);
  }
  std::sort(ends.begin(), ends.end());
  return ends;
}

// Positions of the segment [first, last] whose nodes recompute the values of the segment the
// backward reads, found backwards from them (kept values, constants and random draws are read, not
// copied).
std::set<size_t> segment_nodes(const Graph& g, const Forward& f, size_t first, size_t last,
                               const std::set<std::string>& kept, const Readers& readers) {
  std::vector<std::string> stack;
  for (size_t p = first; p <= last; ++p)
    for (const auto& out : g.nodes[f.order[p]].outputs)
      if (!out.empty() && f.dependent.count(out) && !kept.count(out) && readers.count(out)) stack.push_back(out);
  std::set<size_t> needed;
  while (!stack.empty()) {
    const std::string v = stack.back();
    stack.pop_back();
    const auto it = f.position.find(v);
    if (it == f.position.end() || it->second < first || it->second > last || kept.count(v) || !f.runtime.count(v))
      continue;
    const Node& n = g.nodes[f.order[it->second]];
    if (draws_anew(n) || !needed.insert(it->second).second) continue;
    for (const auto& in : n.inputs)
      if (!in.empty()) stack.push_back(in);
  }
  return needed;
}

}  // namespace

RecomputeReport recompute_segments(Model& model, size_t forward_nodes, const std::vector<std::string>& parameters,
                                   const RecomputeOptions& options) {
  RecomputeReport report;
  if (!options.enabled) return report;
  Graph& g = model.graph;
  const Forward f = forward_of(g, forward_nodes, parameters);
  Readers readers;  // backward readers of each forward value
  for (size_t i = forward_nodes; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty() && f.position.count(in)) readers[in].push_back(i);
  const auto ends = options.boundaries.empty() ? choose_cuts(g, f, readers) : named_ends(f, options.boundaries);
  std::set<std::string> kept;  // graph outputs and boundaries: read, never recomputed
  for (const ValueInfo& v : g.outputs) kept.insert(v.name);
  for (const auto& [p, value] : ends) {
    kept.insert(value);
    report.boundaries.push_back(value);
  }
  GraphEditor edit(model);
  std::map<size_t, std::vector<Node>, std::greater<>> inserts;  // backward position -> copies before it
  size_t first = 0;
  for (const auto& [last, boundary] : ends) {  // segments (previous end, end]; the last one is not recomputed
    const std::set<size_t> needed = segment_nodes(g, f, first, last, kept, readers);
    first = last + 1;
    std::map<std::string, std::string> copy_of;
    std::vector<Node> copies;
    for (size_t p : needed) {  // in forward order
      Node c = g.nodes[f.order[p]];
      c.name += kRecomputeSuffix;  // random draws keyed on the original's name (kiln/random.h)
      for (auto& in : c.inputs)
        if (auto it = copy_of.find(in); it != copy_of.end()) in = it->second;
      for (auto& out : c.outputs) {
        if (out.empty()) continue;
        const std::string fresh = edit.fresh(out + std::string(kRecomputeSuffix));
        copy_of[out] = fresh;
        out = fresh;
      }
      copies.push_back(std::move(c));
    }
    size_t at = g.nodes.size();
    for (const auto& [value, copy] : copy_of)
      if (auto it = readers.find(value); it != readers.end()) {
        for (size_t r : it->second) {
          std::replace(g.nodes[r].inputs.begin(), g.nodes[r].inputs.end(), value, copy);
          at = std::min(at, r);
        }
        ++report.values;
      }
    if (at == g.nodes.size()) continue;  // nothing of it is read by the backward
    report.nodes += copies.size();
    ++report.segments;
    auto& slot = inserts[at];
    slot.insert(slot.end(), std::make_move_iterator(copies.begin()), std::make_move_iterator(copies.end()));
  }
  for (auto& [at, copies] : inserts)  // from the back, so that earlier positions stay valid
    g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(at), std::make_move_iterator(copies.begin()),
                   std::make_move_iterator(copies.end()));
  return report;
}

}  // namespace kiln
