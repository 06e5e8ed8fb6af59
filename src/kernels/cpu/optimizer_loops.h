// The element loops of ai.kiln.AdamWStep and SGDStep (optimizer_kiln.cpp), as functions that
// parallel_simd_loop (optimizer_common.h) compiles once per instruction set. They live in a header
// so that tests/kernels/optimizer_loops_test.cpp can check every copy against the others.
#pragma once

#include <cmath>
#include <cstdint>

namespace kiln::optim {

// One AdamW update's operands: scalar factors already rounded to T (see the file comment).
template <class T>
struct AdamWArgs {
  const T *x, *g, *m, *v;
  T *x_out, *m_out, *v_out;
  T decay, b1, one_minus_b1, b2, one_minus_b2, bc2_sqrt, eps, neg_step_size;
  bool flag;  // torch: maximize; hf: weight decay applies
};

// torch.optim.AdamW over [begin, end) (the loop body rules: optimizer_common.h).
template <class T>
[[gnu::always_inline]] inline void adamw_torch(const AdamWArgs<T>& a, int64_t begin, int64_t end) {
  const T *x = a.x, *g = a.g, *m = a.m, *v = a.v;
  T *x_out = a.x_out, *m_out = a.m_out, *v_out = a.v_out;
  const T decay = a.decay, b1 = a.b1, one_minus_b1 = a.one_minus_b1, b2 = a.b2, one_minus_b2 = a.one_minus_b2;
  const T bc2_sqrt = a.bc2_sqrt, eps = a.eps, neg_step_size = a.neg_step_size;
  const bool maximize = a.flag;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const T gi = maximize ? -g[i] : g[i];
    const T xi = x[i] * decay;                                // param.mul_(1 - lr * wd)
    const T mi = std::fma(gi, one_minus_b1, m[i] * b1);       // exp_avg.mul_(b1).add_(g, alpha=1-b1)
    const T vi = std::fma(one_minus_b2 * gi, gi, v[i] * b2);  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
    const T denom = std::sqrt(vi) / bc2_sqrt + eps;           // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    x_out[i] = xi + (neg_step_size * mi) / denom;             // param.addcdiv_(exp_avg, denom, -step_size)
    m_out[i] = mi;
    v_out[i] = vi;
  }
}

// transformers.AdamW over [begin, end): `decay` is -lr * weight_decay, applied after the update
// when nonzero; `neg_step_size` carries the bias corrections.
template <class T>
[[gnu::always_inline]] inline void adamw_hf(const AdamWArgs<T>& a, int64_t begin, int64_t end) {
  const T *x = a.x, *g = a.g, *m = a.m, *v = a.v;
  T *x_out = a.x_out, *m_out = a.m_out, *v_out = a.v_out;
  const T neg_decay = a.decay, b1 = a.b1, one_minus_b1 = a.one_minus_b1, b2 = a.b2, one_minus_b2 = a.one_minus_b2;
  const T eps = a.eps, neg_step_size = a.neg_step_size;
  const bool decay = a.flag;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const T gi = g[i];
    const T mi = std::fma(gi, one_minus_b1, m[i] * b1);       // exp_avg.mul_(b1).add_(g, alpha=1-b1)
    const T vi = std::fma(one_minus_b2 * gi, gi, v[i] * b2);  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
    const T denom = std::sqrt(vi) + eps;                      // exp_avg_sq.sqrt().add_(eps)
    const T xi = x[i] + (neg_step_size * mi) / denom;         // p.addcdiv_(exp_avg, denom, -step_size)
    x_out[i] = decay ? std::fma(neg_decay, xi, xi) : xi;      // p.add_(p, alpha=-lr * wd)
    m_out[i] = mi;
    v_out[i] = vi;
  }
}

// One SGD update's operands (buf and buf_out null without momentum).
template <class T>
struct SGDArgs {
  const T *x, *g, *buf;
  T *x_out, *buf_out;
  T neg_lr, wd, mom, one_minus_damp;
  bool first, use_wd, use_momentum, nesterov, maximize;
};

// torch.optim.SGD over [begin, end).
template <class T>
[[gnu::always_inline]] inline void sgd_torch(const SGDArgs<T>& a, int64_t begin, int64_t end) {
  const T *x = a.x, *g = a.g, *buf = a.buf;
  T *x_out = a.x_out, *buf_out = a.buf_out;
  const T neg_lr = a.neg_lr, wd = a.wd, mom = a.mom, one_minus_damp = a.one_minus_damp;
  const bool first = a.first, use_wd = a.use_wd, use_momentum = a.use_momentum, nesterov = a.nesterov;
  const bool maximize = a.maximize;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const T xi = x[i];
    T d = maximize ? -g[i] : g[i];
    if (use_wd) d = std::fma(xi, wd, d);  // d_p.add(param, alpha=wd)
    if (use_momentum) {
      // buf = clone(d_p) at the first step, else buf.mul_(momentum).add_(d_p, alpha=1-dampening)
      const T b = first ? d : std::fma(d, one_minus_damp, buf[i] * mom);
      d = nesterov ? std::fma(b, mom, d) : b;  // d_p.add(buf, alpha=momentum) or buf
      buf_out[i] = b;
    }
    x_out[i] = std::fma(d, neg_lr, xi);  // param.add_(d_p, alpha=-lr)
  }
}

}  // namespace kiln::optim
