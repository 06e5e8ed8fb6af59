// Gradient rule of Einsum (kernels/cpu/einsum.cpp). For an operand whose labels are distinct,
// d(operand) is another Einsum: the other operands and the output gradient (under the output's
// labels) contracted to the operand's labels. Labels only that operand has (summed away in the
// forward) are put back by broadcasting; ellipsis dims the operand broadcast are summed back by
// the builder. An operand with a repeated label (a diagonal, as in "ii->i") gets the gradient of
// its diagonal (the term with each label once) placed back on the diagonal: unsqueezed at each
// repeat and multiplied by the mask where the repeated axes' indices agree. An ellipsis after the
// start of a term ("i...j", "i...i") is moved to the front by transposing the operand (which needs
// its rank), except where nothing broadcasts against it and the output keeps it.
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
// of any rank stays in front (the mask's shape covers the labels and broadcasts over the rest). The
// mask is cast to `dtype`, the operand's.
std::string onto_diagonal(GradContext& g, std::string grad, const std::string& full, const std::string& x,
                          DType dtype) {
  const std::string labels = full[0] == kEllipsis ? full.substr(1) : full;
  const int64_t rank = static_cast<int64_t>(labels.size());
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

// The gradient of operand k, whose term in `eq` is `full` and whose value is `x`: the ellipsis, if
// any, is at the start of the term (it lines up with numpy broadcasting, so Expand and the builder's
// reduction handle it) or, with the labels each once, it is an inner ellipsis that nothing
// broadcasts against and the output keeps (the gradient has its dims exactly).
std::string operand_grad(GradContext& g, const ParsedEquation& eq, size_t k, const std::string& x) {
  const std::string& full = eq.inputs[k];
  std::string term;  // the operand's labels, each once (its diagonal's, when one repeats)
  for (char c : full)
    if (c == kEllipsis || term.find(c) == std::string::npos) term += c;
  const bool diagonal = term.size() != full.size();
  const size_t ell = term.find(kEllipsis);

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
  // An ellipsis the output sums away: the contraction gives it only the other operands' dims, which
  // may be fewer or smaller than this operand's (broadcast against it), so it is expanded back too.
  const bool ellipsis_summed = ell != std::string::npos && eq.output.find(kEllipsis) == std::string::npos;
  if (!missing.empty() || produced.size() != term.size() || ellipsis_summed) {
    if (!missing.empty() && g.opset() < 13)  // Unsqueeze took axes as an attribute before opset 13
      grad = g.emit("Unsqueeze", {grad}, {{"axes", Attribute::of_ints(missing)}});
    else if (!missing.empty())
      grad = g.emit("Unsqueeze",
                    {grad, g.constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(missing.size())}, missing))});
    // The operand's shape, or its diagonal's.
    const std::string of =
        diagonal ? g.emit("Einsum", {x}, {{"equation", Attribute::of_string(unparse(full) + "->" + unparse(term))}})
                 : x;
    grad = g.emit("Expand", {grad, g.emit("Shape", {of})});
  }
  if (diagonal) grad = onto_diagonal(g, grad, full, x, g.dtype(g.I(k)).value_or(DType::Float32));
  return grad;
}

// Whether operand k's inner ellipsis is the exact case operand_grad handles without knowing ranks:
// its labels each once, no other operand has an ellipsis and the output keeps it.
bool exact_inner_ellipsis(const ParsedEquation& eq, size_t k) {
  const std::string& full = eq.inputs[k];
  for (size_t d = 0; d < full.size(); ++d)
    if (full.find(full[d]) != d) return false;
  for (size_t j = 0; j < eq.inputs.size(); ++j)
    if (j != k && eq.inputs[j].find(kEllipsis) != std::string::npos) return false;
  return eq.output.find(kEllipsis) != std::string::npos;
}

// Any other ellipsis after the start of operand k's term: the operand is transposed so that the
// ellipsis dims lead (its rank must be known), differentiated under the term with the ellipsis
// moved to the front, reduced to the transposed operand's shape (an ellipsis broadcast against the
// other operands' is summed back there) and transposed back.
std::string inner_ellipsis_grad(GradContext& g, const ParsedEquation& eq, size_t k, const std::string& equation) {
  const std::string& full = eq.inputs[k];
  const auto rank = g.rank(g.I(k));
  if (!rank)
    throw Unsupported(
        fmt::format("Einsum: gradient of input {} of '{}': its term '{}' has an ellipsis after its "
                    "start, which needs the rank of '{}'{}",
                    k, equation, unparse(full), g.I(k), g.unknown_rank_reason()));
  const int64_t before = static_cast<int64_t>(full.find(kEllipsis));
  const int64_t labels = static_cast<int64_t>(full.size()) - 1;
  const int64_t dims = *rank - labels;  // the ellipsis's rank
  if (dims < 0)
    throw ShapeError(fmt::format("Einsum: input {} of '{}' has rank {}, fewer than the {} labels of its term '{}'", k,
                                 equation, *rank, labels, unparse(full)));
  std::vector<int64_t> perm, inverse(static_cast<size_t>(*rank));
  for (int64_t d = 0; d < dims; ++d) perm.push_back(before + d);
  for (int64_t d = 0; d < before; ++d) perm.push_back(d);
  for (int64_t d = before + dims; d < *rank; ++d) perm.push_back(d);
  for (size_t d = 0; d < perm.size(); ++d) inverse[static_cast<size_t>(perm[d])] = static_cast<int64_t>(d);
  ParsedEquation moved = eq;
  moved.inputs[k] = std::string(1, kEllipsis) + full.substr(0, static_cast<size_t>(before)) +
                    full.substr(static_cast<size_t>(before) + 1);
  const std::string xt = g.emit("Transpose", {g.I(k)}, {{"perm", Attribute::of_ints(perm)}});
  const std::string grad = g.emit(kKilnDomain, "SumToShapeOf", {operand_grad(g, moved, k, xt), xt});
  return g.emit("Transpose", {grad}, {{"perm", Attribute::of_ints(inverse)}});
}

void einsum_grad(GradContext& g) {
  const std::string equation = g.node.attr_string("equation");
  const ParsedEquation eq = parse_equation(equation);
  if (eq.inputs.size() != g.num_inputs())
    throw InvalidModel(fmt::format("Einsum: equation '{}' has {} input terms but the node has {} inputs", equation,
                                   eq.inputs.size(), g.num_inputs()));
  for (size_t k = 0; k < g.num_inputs(); ++k) {
    if (!g.needs(k)) continue;
    const size_t ell = eq.inputs[k].find(kEllipsis);
    if (ell == std::string::npos || ell == 0) g.set_GI(k, operand_grad(g, eq, k, g.I(k)), Broadcast::Maybe);
    else if (exact_inner_ellipsis(eq, k)) g.set_GI(k, operand_grad(g, eq, k, g.I(k)));
    else g.set_GI(k, inner_ellipsis_grad(g, eq, k, equation));
  }
}

const GradientRegistrar r_einsum({"", "Einsum", 1, kMaxOpset}, einsum_grad);

}  // namespace
}  // namespace kiln
