// Gradient rule of Einsum (kernels/cpu/einsum.cpp). For an operand whose labels are distinct,
// d(operand) is another Einsum: the other operands and the output gradient (under the output's
// labels) contracted to the operand's labels. Labels only that operand has (summed away in the
// forward) are put back by broadcasting; ellipsis dims the operand broadcast are summed back by
// the builder. An operand with a repeated label (a diagonal, as in "ii->i") gets the gradient of
// its diagonal (the term with each label once) placed back on the diagonal: unsqueezed at each
// repeat and multiplied by the mask where the repeated axes' indices agree (with a leading ellipsis
// too: "...ii->...i"). Unsupported: a repeated label with an ellipsis not at the start of its term,
// and an operand whose ellipsis is not at the start of its term ("i...j") and broadcasts against
// another operand's or is summed away.
#include <fmt/format.h>

#include <algorithm>

#include "autodiff/registry.h"

namespace kiln {
namespace {

constexpr char kEllipsis = '.';  // "..." is one '.' in a parsed term

std::string parse_term(const std::string& term, const std::string& eq) {
  std::string out;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] != '.') {
      out += term[i];
      continue;
    }
    if (term.compare(i, 3, "...") != 0)
      throw InvalidModel(fmt::format("Einsum: equation '{}' has a malformed ellipsis", eq));
    out += kEllipsis;
    i += 2;
  }
  return out;
}

std::string unparse(const std::string& term) {
  std::string out;
  for (char c : term) out += c == kEllipsis ? std::string("...") : std::string(1, c);
  return out;
}

struct ParsedEquation {
  std::vector<std::string> inputs;
  std::string output;
};

// Splits the equation into terms, making an implicit output explicit as ONNX (numpy) defines it:
// the ellipsis, then the letters used exactly once, in ASCII order.
ParsedEquation parse_equation(const std::string& raw) {
  std::string eq;
  for (char c : raw)
    if (c != ' ') eq += c;
  ParsedEquation p;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    p.inputs.push_back(
        parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), raw));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (arrow != std::string::npos) {
    p.output = parse_term(eq.substr(arrow + 2), raw);
    return p;
  }
  std::string all, once;
  bool ellipsis = false;
  for (const std::string& t : p.inputs) all += t;
  for (char c : all) {
    if (c == kEllipsis) ellipsis = true;
    else if (std::count(all.begin(), all.end(), c) == 1) once += c;
  }
  std::sort(once.begin(), once.end());
  p.output = (ellipsis ? std::string(1, kEllipsis) : std::string()) + once;
  return p;
}

// `grad` (over `full`'s labels each once, in order) placed on the diagonal of an operand `x` whose
// term `full` repeats labels: an axis unsqueezed at each repeat, times the mask where the indices
// of the repeat and of the label's first axis agree. Axes count from the end, so a leading ellipsis
// of any rank stays in front (the mask's shape covers the labels and broadcasts over the rest).
std::string onto_diagonal(GradContext& g, std::string grad, const std::string& full, const std::string& x) {
  const std::string labels = full[0] == kEllipsis ? full.substr(1) : full;
  const int64_t rank = static_cast<int64_t>(labels.size());
  const DType dtype = g.dtype(x).value_or(DType::Float32);
  const auto ints = [&](const std::vector<int64_t>& v) {
    return g.constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
  };
  std::vector<int64_t> repeats;
  for (int64_t d = 0; d < rank; ++d)
    if (labels.find(labels[static_cast<size_t>(d)]) != static_cast<size_t>(d)) repeats.push_back(d - rank);
  grad = g.opset() < 13 ? g.emit("Unsqueeze", {grad}, {{"axes", Attribute::of_ints(repeats)}})
                        : g.emit("Unsqueeze", {grad, ints(repeats)});
  const std::string shape = g.emit("Shape", {x});
  for (int64_t d : repeats) {
    const int64_t first = static_cast<int64_t>(labels.find(labels[static_cast<size_t>(d + rank)])) - rank;
    const std::string n = g.emit("Gather", {shape, g.constant(Tensor::scalar<int64_t>(first))});
    const std::string range =
        g.emit("Range", {g.constant(Tensor::scalar<int64_t>(0)), n, g.constant(Tensor::scalar<int64_t>(1))});
    const auto along = [&](int64_t axis) {  // the range along `axis` (negative) of the labels' dims
      std::vector<int64_t> dims(static_cast<size_t>(rank), 1);
      dims[static_cast<size_t>(axis + rank)] = -1;
      return g.emit("Reshape", {range, ints(dims)});
    };
    const std::string same = g.emit("Equal", {along(first), along(d)});
    grad = g.emit("Mul", {grad, g.emit("Cast", {same}, {{"to", Attribute::of_int(dtype_to_onnx(dtype))}})});
  }
  return grad;
}

// An ellipsis at the start lines up with numpy broadcasting, so Expand and the builder's reduction
// handle it (true). Elsewhere only the exact case is handled: no other operand has an ellipsis (none
// broadcasts against it) and the output keeps it (so the gradient has its dims); else Unsupported.
bool ellipsis_is_leading(const ParsedEquation& eq, size_t k, const std::string& term, const std::string& equation) {
  const size_t ell = term.find(kEllipsis);
  if (ell == std::string::npos || ell == 0) return true;
  bool others_have_ellipsis = false;
  for (size_t j = 0; j < eq.inputs.size(); ++j)
    if (j != k && eq.inputs[j].find(kEllipsis) != std::string::npos) others_have_ellipsis = true;
  if (others_have_ellipsis || eq.output.find(kEllipsis) == std::string::npos)
    throw Unsupported(
        fmt::format("Einsum: gradient of input {} of '{}': its ellipsis is not at the start of its "
                    "term '{}' and is broadcast or summed away; this form has no gradient rule yet",
                    k, equation, unparse(term)));
  return false;
}

void einsum_grad(GradContext& g) {
  const std::string equation = g.node.attr_string("equation");
  const ParsedEquation eq = parse_equation(equation);
  if (eq.inputs.size() != g.num_inputs())
    throw InvalidModel(fmt::format("Einsum: equation '{}' has {} input terms but the node has {} inputs", equation,
                                   eq.inputs.size(), g.num_inputs()));
  for (size_t k = 0; k < g.num_inputs(); ++k) {
    if (!g.needs(k)) continue;
    const std::string& full = eq.inputs[k];
    std::string term;  // the operand's labels, each once (its diagonal's, when one repeats)
    for (char c : full)
      if (c == kEllipsis || term.find(c) == std::string::npos) term += c;
    const bool diagonal = term.size() != full.size();
    if (diagonal && full.find(kEllipsis) != std::string::npos && full[0] != kEllipsis)
      throw Unsupported(
          fmt::format("Einsum: gradient of input {} of '{}': its term '{}' repeats a label and has an "
                      "ellipsis after its start; this form has no gradient rule yet",
                      k, equation, unparse(full)));
    const size_t ell = term.find(kEllipsis);
    const bool leading = ellipsis_is_leading(eq, k, term, equation);

    // The contraction's inputs: the other operands and the output gradient.
    std::vector<std::string> values, terms;
    for (size_t j = 0; j < g.num_inputs(); ++j) {
      if (j == k) continue;
      values.push_back(g.I(j));
      terms.push_back(eq.inputs[j]);
    }
    values.push_back(g.GO(0));
    terms.push_back(eq.output);
    std::string available;
    for (const std::string& t : terms) available += t;

    // The operand's labels that the contraction can produce; the rest are broadcast back.
    std::string produced;
    // Axes of the missing labels: counted from the end after the ellipsis and from the start before
    // it, so its rank need not be known.
    std::vector<int64_t> missing;
    const int64_t n = static_cast<int64_t>(term.size());
    const int64_t ell_at = ell == std::string::npos ? -1 : static_cast<int64_t>(ell);
    for (int64_t d = 0; d < n; ++d) {
      const char c = term[static_cast<size_t>(d)];
      if (available.find(c) != std::string::npos) produced += c;
      else if (c != kEllipsis) missing.push_back(d < ell_at ? d : d - n);
    }
    std::string grad;
    if (values.size() == 1 && terms[0] == produced) {
      grad = values[0];  // the contraction would copy the gradient as it is
    } else {
      std::string lhs;
      for (size_t t = 0; t < terms.size(); ++t) lhs += (t ? "," : "") + unparse(terms[t]);
      grad = g.emit("Einsum", values, {{"equation", Attribute::of_string(lhs + "->" + unparse(produced))}});
    }
    if (!missing.empty() || produced.size() != term.size()) {
      if (!missing.empty() && g.opset() < 13)  // Unsqueeze took axes as an attribute before opset 13
        grad = g.emit("Unsqueeze", {grad}, {{"axes", Attribute::of_ints(missing)}});
      else if (!missing.empty())
        grad =
            g.emit("Unsqueeze",
                   {grad, g.constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(missing.size())}, missing))});
      // The operand's shape, or its diagonal's.
      const std::string of =
          diagonal
              ? g.emit("Einsum", {g.I(k)}, {{"equation", Attribute::of_string(unparse(full) + "->" + unparse(term))}})
              : g.I(k);
      grad = g.emit("Expand", {grad, g.emit("Shape", {of})});
    }
    if (diagonal) grad = onto_diagonal(g, grad, full, g.I(k));
    g.set_GI(k, grad, leading ? Broadcast::Maybe : Broadcast::No);
  }
}

const GradientRegistrar r_einsum({"", "Einsum", 1, kMaxOpset}, einsum_grad);

}  // namespace
}  // namespace kiln
