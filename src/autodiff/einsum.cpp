// Gradient rule of Einsum (kernels/cpu/einsum.cpp). For an operand whose labels are distinct,
// d(operand) is another Einsum: the other operands and the output gradient (under the output's
// labels) contracted to the operand's labels. Labels only that operand has (summed away in the
// forward) are put back by broadcasting; ellipsis dims the operand broadcast are summed back by
// the builder. Two rare forms are Unsupported: an operand with a repeated label (a diagonal, as in
// "ii->i") and an operand whose ellipsis is not at the start of its term ("i...j") and broadcasts
// against another operand's or is summed away.
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

void einsum_grad(GradContext& g) {
  const std::string equation = g.node.attr_string("equation");
  const ParsedEquation eq = parse_equation(equation);
  if (eq.inputs.size() != g.num_inputs())
    throw InvalidModel(fmt::format("Einsum: equation '{}' has {} input terms but the node has {} inputs", equation,
                                   eq.inputs.size(), g.num_inputs()));
  for (size_t k = 0; k < g.num_inputs(); ++k) {
    if (!g.needs(k)) continue;
    const std::string& term = eq.inputs[k];
    for (char c : term)
      if (std::count(term.begin(), term.end(), c) > 1)
        throw Unsupported(
            fmt::format("Einsum: gradient of input {} of '{}': its term '{}' repeats a label (a diagonal); "
                        "this form has no gradient rule yet",
                        k, equation, unparse(term)));
    // An ellipsis at the start lines up with numpy broadcasting, so Expand and the builder's
    // reduction handle it. Elsewhere only the exact case is handled: no other operand has an
    // ellipsis (none broadcasts against it) and the output keeps it (so the gradient has its dims).
    const size_t ell = term.find(kEllipsis);
    const bool leading = ell == std::string::npos || ell == 0;
    bool others_have_ellipsis = false;
    for (size_t j = 0; j < eq.inputs.size(); ++j)
      if (j != k && eq.inputs[j].find(kEllipsis) != std::string::npos) others_have_ellipsis = true;
    if (!leading && (others_have_ellipsis || eq.output.find(kEllipsis) == std::string::npos))
      throw Unsupported(
          fmt::format("Einsum: gradient of input {} of '{}': its ellipsis is not at the start of its "
                      "term '{}' and is broadcast or summed away; this form has no gradient rule yet",
                      k, equation, unparse(term)));

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
      grad = g.emit("Expand", {grad, g.emit("Shape", {g.I(k)})});
    }
    g.set_GI(k, grad, leading ? Broadcast::Maybe : Broadcast::No);
  }
}

const GradientRegistrar r_einsum({"", "Einsum", 1, kMaxOpset}, einsum_grad);

}  // namespace
}  // namespace kiln
