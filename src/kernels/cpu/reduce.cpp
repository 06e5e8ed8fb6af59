// ReduceSum and ReduceMean over any set of axes, with keepdims and noop_with_empty_axes.
// Axes are an attribute up to ReduceSum-11 / ReduceMean-13 and an optional input from ReduceSum-13 /
// ReduceMean-18; as an input they must be known when planning (a constant), like every shape input.
//
// The input is viewed as alternating groups of kept and reduced dimensions (size-1 dims dropped,
// neighbours with the same role merged). Each output element, or block of a trailing kept group,
// accumulates over the reduced groups: a contiguous run when the last group is reduced, a vector
// of the trailing kept group otherwise. Floats accumulate in double, integers in 64 bits with
// wrap-around, so results do not depend on the thread count.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/elementwise_common.h"

namespace kiln {

namespace {

template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double,
                                 std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

// Sum of n contiguous elements with eight independent partial sums (ILP, still deterministic).
template <class T, class A>
A sum_contiguous(const T* p, int64_t n) {
  A part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) part[k] = wrap_add(part[k], static_cast<A>(load(p[i + k])));
  for (; i < n; ++i) part[0] = wrap_add(part[0], static_cast<A>(load(p[i])));
  A s = 0;
  for (A v : part) s = wrap_add(s, v);
  return s;
}

// The collapsed view: groups of dims, each reduced or kept, with contiguous input strides.
struct ReducePlan {
  std::vector<int64_t> outer_sizes, outer_strides;  // kept groups before the trailing one
  std::vector<int64_t> red_sizes, red_strides;      // reduced groups
  int64_t inner = 1;                                // trailing kept group (1 if the last is reduced)
  int64_t outer = 1;                                // product of outer_sizes
  int64_t reduced = 1;                              // elements summed per output element
};

ReducePlan make_reduce_plan(const Shape& shape, const std::vector<bool>& reduce) {
  std::vector<std::pair<int64_t, bool>> groups;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!groups.empty() && groups.back().second == reduce[i]) groups.back().first *= shape[i];
    else groups.emplace_back(shape[i], reduce[i]);
  }
  ReducePlan p;
  int64_t stride = 1;
  std::vector<int64_t> strides(groups.size());
  for (size_t g = groups.size(); g-- > 0;) {
    strides[g] = stride;
    stride *= groups[g].first;
  }
  size_t end = groups.size();
  if (!groups.empty() && !groups.back().second) {
    p.inner = groups.back().first;
    --end;
  }
  for (size_t g = 0; g < end; ++g) {
    if (groups[g].second) {
      p.red_sizes.push_back(groups[g].first);
      p.red_strides.push_back(strides[g]);
      p.reduced *= groups[g].first;
    } else {
      p.outer_sizes.push_back(groups[g].first);
      p.outer_strides.push_back(strides[g]);
      p.outer *= groups[g].first;
    }
  }
  return p;
}

template <class T>
void reduce(const ReducePlan& p, const T* x, T* y, bool mean, int64_t count) {
  using A = acc_t<T>;
  // A zero-size reduced group leaves nothing to read: sums are 0 (and float means 0/0 = NaN).
  const bool empty = std::any_of(p.red_sizes.begin(), p.red_sizes.end(), [](int64_t s) { return s == 0; });
  auto finish = [&](A s) {
    if (!mean) return store<T>(static_cast<compute_t<T>>(s));
    if constexpr (std::is_floating_point_v<A>) return store<T>(static_cast<compute_t<T>>(s / static_cast<double>(count)));
    else return static_cast<T>(s / static_cast<A>(count));  // count > 0: checked in infer
  };
  constexpr int64_t kBlock = 1024;
  const int64_t blocks = (p.inner + kBlock - 1) / kBlock;
  const int64_t tasks = p.outer * blocks;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, p.reduced * std::min(p.inner, kBlock)));
  const bool last_reduced = p.inner == 1 && !p.red_sizes.empty();
  const size_t nr = p.red_sizes.size();
  // Walking the reduced groups: with the last one contiguous (last_reduced) it is summed as a run.
  const size_t odo = last_reduced ? nr - 1 : nr;
  const int64_t run = last_reduced ? p.red_sizes.back() : 1;

  parallel_for(tasks, grain, [&](int64_t tb, int64_t te) {
    std::vector<int64_t> idx(nr);
    A acc[kBlock];
    for (int64_t t = tb; t < te; ++t) {
      const int64_t o = t / blocks;
      const int64_t j0 = (t % blocks) * kBlock;
      const int64_t jn = std::min(kBlock, p.inner - j0);
      int64_t base = 0;
      for (size_t k = p.outer_sizes.size(), rem = static_cast<size_t>(o); k-- > 0;) {
        base += static_cast<int64_t>(rem % static_cast<size_t>(p.outer_sizes[k])) * p.outer_strides[k];
        rem /= static_cast<size_t>(p.outer_sizes[k]);
      }
      std::fill(acc, acc + jn, A(0));
      if (!empty) {
        std::fill(idx.begin(), idx.end(), 0);
        int64_t off = base + j0;
        while (true) {
          if (last_reduced) {
            acc[0] = wrap_add(acc[0], sum_contiguous<T, A>(x + off, run));
          } else {
            const T* px = x + off;
            for (int64_t j = 0; j < jn; ++j) acc[j] = wrap_add(acc[j], static_cast<A>(load(px[j])));
          }
          bool done = true;  // advance the odometer over reduced groups [0, odo)
          for (size_t k = odo; k-- > 0;) {
            off += p.red_strides[k];
            if (++idx[k] < p.red_sizes[k]) {
              done = false;
              break;
            }
            off -= p.red_strides[k] * p.red_sizes[k];
            idx[k] = 0;
          }
          if (done) break;
        }
      }
      T* py = y + o * p.inner + j0;
      for (int64_t j = 0; j < jn; ++j) py[j] = finish(acc[j]);
    }
  });
}

class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(const Node& n, bool mean, bool axes_input) : Kernel(n), mean_(mean), axes_input_(axes_input) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const int64_t rank = static_cast<int64_t>(in.size());
    const bool keepdims = node_.attr_int("keepdims", 1) != 0;
    std::vector<int64_t> axes;
    if (axes_input_) {
      if (ctx.has_input(1)) axes = ctx.value(1).to_int64_vector();
    } else {
      axes = node_.attr_ints("axes", {});
    }
    noop_ = axes.empty() && axes_input_ && node_.attr_int("noop_with_empty_axes", 0) != 0;
    reduce_.assign(in.size(), axes.empty() && !noop_);
    for (int64_t a : axes) {
      const size_t k = static_cast<size_t>(normalize_axis(a, rank, "axes entry"));
      if (rank == 0) continue;
      if (reduce_[k])
        throw InvalidModel(fmt::format("axes [{}] name axis {} twice (input shape {})", fmt::join(axes, ", "), k,
                                       to_string(in)));
      reduce_[k] = true;
    }
    Shape out;
    count_ = 1;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!reduce_[i]) out.push_back(in[i]);
      else if (keepdims) out.push_back(1);
      if (reduce_[i]) count_ *= in[i];
    }
    if (mean_ && count_ == 0 && is_integer(ctx.dtype(0)) && numel(out) > 0)
      throw InvalidArgument(fmt::format("integer mean over zero elements: input '{}' has shape {} and the "
                                        "reduced axes are empty", node_.inputs.at(0), to_string(in)));
    return {TensorMeta{ctx.dtype(0), out, false, Tensor()}};
  }

  void prepare(const InferContext& ctx, const std::vector<TensorMeta>&) override {
    plan_ = make_reduce_plan(ctx.shape(0), reduce_);
    shape_ = ctx.shape(0);
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (noop_) {
      if (x.nbytes() > 0 && x.raw_data() != y.raw_data()) std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());
      return;
    }
    if (x.shape() != shape_) {  // not prepared for this shape
      plan_ = make_reduce_plan(x.shape(), reduce_);
      shape_ = x.shape();
    }
    dispatch(NumericTypes{}, x.dtype(), fmt::format("input '{}'", node_.inputs.at(0)), [&](auto tag) {
      using T = decltype(tag);
      reduce<T>(plan_, x.data<T>(), y.data<T>(), mean_, count_);
    });
  }

 private:
  bool mean_, axes_input_;
  bool noop_ = false;
  std::vector<bool> reduce_;
  int64_t count_ = 1;
  ReducePlan plan_;
  Shape shape_{-1};
};

template <bool Mean, bool AxesInput>
KernelRegistrar register_reduce(const char* op, int64_t since, int64_t end) {
  return KernelRegistrar({"", op, since, end, NumericTypes::dtypes(), 0, {}},
                         [](const Node& n) { return std::make_unique<ReduceKernel>(n, Mean, AxesInput); });
}

const KernelRegistrar kRegistrars[] = {
    register_reduce<false, false>("ReduceSum", 1, 12),
    register_reduce<false, true>("ReduceSum", 13, kMaxOpset),
    register_reduce<true, false>("ReduceMean", 1, 17),
    register_reduce<true, true>("ReduceMean", 18, kMaxOpset),
};

}  // namespace

}  // namespace kiln
