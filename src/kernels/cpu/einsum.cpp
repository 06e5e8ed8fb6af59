// Einsum: any equation with an explicit ("ij,jk->ik") or implicit ("ij,jk") output, ellipses
// (broadcast like numpy), and repeated labels within an operand (diagonals, traces).
//
// Lowering: every operand is first gathered into a contiguous buffer over its distinct labels,
// summing the labels nothing else uses (a repeated label is a stride sum, so diagonals cost nothing
// extra). Operands then fold left to right, each pair becoming one batched matrix product
// [batch, M, K] x [batch, K, N] (BLAS for float32/float64, a plain loop for integers), where batch
// labels are shared and still needed, K labels are shared and not needed, M and N belong to one side.
// A last gather permutes the result into the output's label order.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/parallel.h"
#include "kernels/cpu/blas.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

constexpr int kEllipsisBase = 52;  // labels 0-51 are a-z and A-Z; ellipsis dims follow

struct Equation {
  std::vector<std::vector<int>> inputs;  // per input: the label of each of its dims, in order
  std::vector<int> output;
  std::map<int, int64_t> size;  // label -> size (the broadcast size for ellipsis dims)
};

int letter_label(char c) { return c >= 'a' && c <= 'z' ? c - 'a' : 26 + (c - 'A'); }

// Splits one term into letter labels and the ellipsis position (-1: none).
std::vector<int> parse_term(const std::string& term, const std::string& eq, int& ellipsis_at) {
  std::vector<int> labels;
  ellipsis_at = -1;
  for (size_t i = 0; i < term.size(); ++i) {
    const char c = term[i];
    if (c == '.') {
      if (term.compare(i, 3, "...") != 0 || ellipsis_at >= 0)
        throw InvalidModel(
            fmt::format("Einsum: equation '{}': term '{}' has a malformed or second ellipsis", eq, term));
      ellipsis_at = static_cast<int>(labels.size());
      i += 2;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      labels.push_back(letter_label(c));
    } else {
      throw InvalidModel(
          fmt::format("Einsum: equation '{}' has the character '{}', not a letter, ',', '->' or '...'", eq, c));
    }
  }
  return labels;
}

Equation parse(const std::string& raw, const std::vector<Shape>& shapes) {
  std::string eq;
  for (char c : raw)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != shapes.size())
    throw InvalidModel(fmt::format("Einsum: equation '{}' has {} input terms but the node has {} inputs", raw,
                                   terms.size(), shapes.size()));
  Equation e;
  int ellipsis_rank = 0;
  std::vector<std::vector<int>> letters(terms.size());
  std::vector<int> ellipsis_at(terms.size());
  for (size_t t = 0; t < terms.size(); ++t) {
    letters[t] = parse_term(terms[t], raw, ellipsis_at[t]);
    const int64_t rank = static_cast<int64_t>(shapes[t].size()), named = static_cast<int64_t>(letters[t].size());
    if (ellipsis_at[t] < 0 ? rank != named : rank < named)
      throw ShapeError(fmt::format("Einsum: equation '{}': term '{}' names {} dims but input {} has shape {}", raw,
                                   terms[t], named, t, to_string(shapes[t])));
    if (ellipsis_at[t] >= 0) ellipsis_rank = std::max<int>(ellipsis_rank, static_cast<int>(rank - named));
  }
  // Ellipsis dims align to the right, as numpy broadcasting does.
  for (size_t t = 0; t < terms.size(); ++t) {
    std::vector<int> labels = letters[t];
    if (ellipsis_at[t] >= 0) {
      const int r = static_cast<int>(shapes[t].size() - letters[t].size());
      std::vector<int> ell;
      ell.reserve(static_cast<size_t>(std::max(r, 0)));
      for (int i = 0; i < r; ++i) ell.push_back(kEllipsisBase + ellipsis_rank - r + i);
      labels.insert(labels.begin() + ellipsis_at[t], ell.begin(), ell.end());
    }
    for (size_t d = 0; d < labels.size(); ++d) {
      const int l = labels[d];
      const int64_t n = shapes[t][d];
      auto [it, fresh] = e.size.emplace(l, n);
      if (fresh || it->second == n) continue;
      if (l >= kEllipsisBase && (it->second == 1 || n == 1)) {
        it->second = std::max(it->second, n);
        continue;
      }
      throw ShapeError(fmt::format("Einsum: equation '{}': a label has size {} in input {} {} but {} elsewhere", raw, n,
                                   t, to_string(shapes[t]), it->second));
    }
    e.inputs.push_back(std::move(labels));
  }
  if (arrow != std::string::npos) {
    int at = -1;
    std::vector<int> out = parse_term(eq.substr(arrow + 2), raw, at);
    for (size_t i = 0; i < out.size(); ++i) {
      if (!e.size.count(out[i]) || std::count(out.begin(), out.end(), out[i]) > 1)
        throw InvalidModel(fmt::format("Einsum: equation '{}': output label {} is repeated or absent from the inputs",
                                       raw, eq.substr(arrow + 2)));
    }
    if (at >= 0)
      for (int i = 0; i < ellipsis_rank; ++i) out.insert(out.begin() + at + i, kEllipsisBase + i);
    e.output = std::move(out);
  } else {
    // Implicit output: the ellipsis dims, then the letters used once, in alphabetical (ASCII) order.
    for (int i = 0; i < ellipsis_rank; ++i) e.output.push_back(kEllipsisBase + i);
    std::vector<int> once;
    for (const auto& [l, n] : e.size) {
      if (l >= kEllipsisBase) continue;
      int count = 0;
      for (const auto& in : e.inputs) count += static_cast<int>(std::count(in.begin(), in.end(), l));
      if (count == 1) once.push_back(l);
    }
    std::sort(once.begin(), once.end(),
              [](int a, int b) { return (a < 26 ? 'a' + a : 'A' + a - 26) < (b < 26 ? 'a' + b : 'A' + b - 26); });
    e.output.insert(e.output.end(), once.begin(), once.end());
  }
  return e;
}

template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;

// An operand during the fold: a buffer over distinct labels, or (at first) an input's own memory
// with possibly repeated labels.
template <class T>
struct Operand {
  std::vector<T> owned;
  const T* data = nullptr;
  std::vector<int> labels;
  Shape dims;
  Strides strides;
};

// dst[out index] = sum over `sum` labels of src, where each label's source stride is the sum of
// the strides of its occurrences (diagonals) and 0 where the operand has size 1 (broadcast).
template <class T>
std::vector<T> gather(const Operand<T>& src, const std::vector<int>& out, const std::vector<int>& sum,
                      const std::map<int, int64_t>& size) {
  auto stride_of = [&](int l) {
    int64_t s = 0;
    for (size_t d = 0; d < src.labels.size(); ++d)
      if (src.labels[d] == l && src.dims[d] != 1) s += src.strides[d];
    return s;
  };
  Shape od, sd;
  Strides os, ss;
  for (int l : out) {
    od.push_back(size.at(l));
    os.push_back(stride_of(l));
  }
  for (int l : sum) {
    sd.push_back(size.at(l));
    ss.push_back(stride_of(l));
  }
  std::vector<T> dst(static_cast<size_t>(numel(od)));
  const int64_t inner = numel(sd);
  const int64_t cols = od.empty() ? 1 : od.back(), rows = cols == 0 ? 0 : numel(od) / cols;
  const int64_t col_stride = od.empty() ? 0 : os.back();
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols * inner)), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> sidx(sd.size());
    for (int64_t r = begin; r < end; ++r) {
      int64_t base = 0, rem = r;
      for (size_t d = od.size() - (od.empty() ? 0 : 1); d-- > 0;) {
        base += (rem % od[d]) * os[d];
        rem /= od[d];
      }
      for (int64_t c = 0; c < cols; ++c) {
        const T* p = src.data + base + c * col_stride;
        Acc<T> acc = 0;
        std::fill(sidx.begin(), sidx.end(), 0);
        int64_t off = 0;
        for (int64_t i = 0; i < inner; ++i) {
          acc += static_cast<Acc<T>>(p[off]);
          for (size_t d = sd.size(); d-- > 0;) {  // odometer over the summed labels
            off += ss[d];
            if (++sidx[d] < sd[d]) break;
            off -= ss[d] * sd[d];
            sidx[d] = 0;
          }
        }
        dst[size_t(r * cols + c)] = static_cast<T>(acc);
      }
    }
  });
  return dst;
}

template <class T>
void batched_gemm(const T* a, const T* b, T* c, int64_t batch, int64_t m, int64_t k, int64_t n) {
  if (k == 0) {
    std::fill(c, c + batch * m * n, T(0));
    return;
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    for (int64_t i = 0; i < batch; ++i) {
      if (m == 0 || n == 0) break;
      if constexpr (std::is_same_v<T, float>)
        blas::sgemm(blas::plain(m, n, k), 1.f, a + i * m * k, b + i * k * n, 0.f, c + i * m * n);
      else blas::dgemm(blas::plain(m, n, k), 1.0, a + i * m * k, b + i * k * n, 0.0, c + i * m * n);
    }
  } else {
    parallel_for(batch * m, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T* ar = a + row * k;
        const T* bm = b + (row / m) * k * n;
        T* cr = c + row * n;
        std::fill(cr, cr + n, T(0));
        for (int64_t p = 0; p < k; ++p)
          for (int64_t j = 0; j < n; ++j) cr[j] = T(cr[j] + ar[p] * bm[p * n + j]);
      }
    });
  }
}

bool has(const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); }

template <class T>
void einsum(const Equation& e, const std::vector<const T*>& inputs, const std::vector<Shape>& shapes, T* y) {
  const size_t n = inputs.size();
  // Labels still needed after operand i: in the output or in a later input.
  auto needed_after = [&](size_t i) {
    std::vector<int> need = e.output;
    for (size_t j = i + 1; j < n; ++j) need.insert(need.end(), e.inputs[j].begin(), e.inputs[j].end());
    return need;
  };
  auto distinct = [](const std::vector<int>& v) {
    std::vector<int> d;
    for (int l : v)
      if (!has(d, l)) d.push_back(l);
    return d;
  };
  // Reduces an input to its distinct labels that `keep` lists, summing the rest.
  auto prepare = [&](size_t i, const std::vector<int>& keep) {
    Operand<T> in{{}, inputs[i], e.inputs[i], shapes[i], contiguous_strides(shapes[i])};
    std::vector<int> out, sum;
    for (int l : distinct(e.inputs[i])) (has(keep, l) ? out : sum).push_back(l);
    Operand<T> r;
    r.owned = gather(in, out, sum, e.size);
    r.data = r.owned.data();
    r.labels = out;
    for (int l : out) r.dims.push_back(e.size.at(l));
    r.strides = contiguous_strides(r.dims);
    return r;
  };
  Operand<T> acc = prepare(0, needed_after(0));
  for (size_t i = 1; i < n; ++i) {
    const std::vector<int> later = needed_after(i);
    std::vector<int> keep_b = later;
    keep_b.insert(keep_b.end(), acc.labels.begin(), acc.labels.end());
    Operand<T> b = prepare(i, keep_b);
    std::vector<int> batch, m_labels, k_labels, n_labels, a_sum;
    for (int l : acc.labels) {
      if (has(b.labels, l)) (has(later, l) ? batch : k_labels).push_back(l);
      else (has(later, l) ? m_labels : a_sum).push_back(l);
    }
    for (int l : b.labels)
      if (!has(acc.labels, l)) n_labels.push_back(l);  // b's unneeded labels were summed in prepare
    auto cat = [](std::vector<int> x, const std::vector<int>& y, const std::vector<int>& z) {
      x.insert(x.end(), y.begin(), y.end());
      x.insert(x.end(), z.begin(), z.end());
      return x;
    };
    const std::vector<T> a2 = gather(acc, cat(batch, m_labels, k_labels), a_sum, e.size);
    const std::vector<T> b2 = gather(b, cat(batch, k_labels, n_labels), {}, e.size);
    auto count = [&](const std::vector<int>& ls) {
      int64_t c = 1;
      for (int l : ls) c *= e.size.at(l);
      return c;
    };
    Operand<T> r;
    r.labels = cat(batch, m_labels, n_labels);
    for (int l : r.labels) r.dims.push_back(e.size.at(l));
    r.strides = contiguous_strides(r.dims);
    r.owned.resize(size_t(numel(r.dims)));
    batched_gemm(a2.data(), b2.data(), r.owned.data(), count(batch), count(m_labels), count(k_labels), count(n_labels));
    r.data = r.owned.data();
    acc = std::move(r);
  }
  std::vector<int> sum;
  for (int l : acc.labels)
    if (!has(e.output, l)) sum.push_back(l);
  const std::vector<T> out = gather(acc, e.output, sum, e.size);
  std::copy(out.begin(), out.end(), y);
}

class EinsumKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.num_inputs() == 0) throw InvalidModel("Einsum: needs at least one input");
    std::vector<Shape> shapes;
    bool dyn = false;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      if (ctx.dtype(i) != ctx.dtype(0))
        throw TypeError(fmt::format("Einsum: input {} is {}{} but input 0 is {}{}; all inputs must share a dtype", i,
                                    dtype_name(ctx.dtype(i)), to_string(ctx.shape(i)), dtype_name(ctx.dtype(0)),
                                    to_string(ctx.shape(0))));
      shapes.push_back(ctx.shape(i));
      dyn = dyn || ctx.input(i).dynamic;
    }
    eq_ = parse(node_.attr_string("equation"), shapes);
    Shape out;
    for (int l : eq_.output) out.push_back(eq_.size.at(l));
    return {TensorMeta{ctx.dtype(0), out, dyn, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    std::vector<Shape> shapes;
    for (const Tensor* t : ctx.inputs) shapes.push_back(t->shape());
    Tensor& y = ctx.output(0);
    visit_dtype(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, Half>) {
        // float16 computes in float32 and rounds once at the end.
        std::vector<std::vector<float>> wide(ctx.inputs.size());
        std::vector<const float*> ptrs;
        for (size_t i = 0; i < ctx.inputs.size(); ++i) {
          const Half* p = ctx.inputs[i]->data<Half>();
          for (int64_t j = 0; j < ctx.inputs[i]->numel(); ++j) wide[i].push_back(half_to_float(p[j]));
          ptrs.push_back(wide[i].data());
        }
        std::vector<float> out(size_t(y.numel()));
        einsum<float>(eq_, ptrs, shapes, out.data());
        for (size_t j = 0; j < out.size(); ++j) y.data<Half>()[j] = float_to_half(out[j]);
      } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                           std::is_same_v<T, int64_t> || std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>) {
        std::vector<const T*> ptrs;
        for (const Tensor* t : ctx.inputs) ptrs.push_back(t->data<T>());
        einsum<T>(eq_, ptrs, shapes, y.data<T>());
      } else {
        throw Unsupported(fmt::format("Einsum: {} inputs", dtype_name(y.dtype())));
      }
    });
  }

 private:
  Equation eq_;
};

const KernelRegistrar einsum_reg({"",
                                  "Einsum",
                                  12,
                                  kMaxOpset,
                                  {DType::Float32, DType::Float64, DType::Float16, DType::Int32, DType::Int64,
                                   DType::Uint32, DType::Uint64}},
                                 [](const Node& n) { return std::make_unique<EinsumKernel>(n); });

}  // namespace
}  // namespace kiln
