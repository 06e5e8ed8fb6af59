// The RNN / GRU / LSTM engine (rnn_common.h): forward through time, and the gradient by running the
// forward again with a tape and then back through time.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/packed_product.h"
#include "kernels/cpu/rnn_common.h"

namespace kiln::rnn {
namespace {

template <class T>
void gemm(const blas::GemmShape& s, const T* a, const T* b, T beta, T* c) {
  if constexpr (std::is_same_v<T, float>) blas::sgemm(s, 1.0f, a, b, beta, c);
  else blas::dgemm(s, 1.0, a, b, beta, c);
}

// From this many time steps on, float32 passes pack the recurrent weights once (PackedProduct)
// instead of letting each step's product pack them again.
constexpr int64_t kPackFromSteps = 4;

// The product by the recurrent weights repeated at every step: C = A op(R), R packed once for float32
// over enough steps, else a gemm per call.
template <class T>
class RecurrentProduct {
 public:
  RecurrentProduct(const blas::GemmShape& s, const T* r, int64_t steps) : s_(s), r_(r) {
    if constexpr (std::is_same_v<T, float>)
      if (steps >= kPackFromSteps)
        packed_ = std::make_unique<PackedProduct>(s.m, s.n, s.k, r, s.trans_b, s.lda, s.ldb, s.ldc);
  }
  void run(const T* a, T* c) {
    if constexpr (std::is_same_v<T, float>)
      if (packed_) return packed_->run(a, c);
    gemm<T>(s_, a, r_, T(0), c);
  }

 private:
  blas::GemmShape s_;
  const T* r_;
  std::unique_ptr<PackedProduct> packed_;
};

// What the backward pass needs of one direction's forward, indexed by time step t and batch row b.
template <class T>
struct Tape {
  std::vector<T> pre;    // [S, B, G*H] gate pre-activations (with peepholes; before clip)
  std::vector<T> act;    // [S, B, G*H] the gates (LSTM's f is 1 - i with input_forget)
  std::vector<T> hprev;  // [S, B, H] the state entering step t
  std::vector<T> cprev;  // LSTM: [S, B, H] the cell entering step t
  std::vector<T> cell;   // LSTM: [S, B, H] the cell leaving step t
  std::vector<T> q;      // GRU: [S, B, H] H_prev Rh^T + Rbh (linear_before_reset), else r (.) H_prev
};

// One direction of one layer.
template <class T>
class Pass {
 public:
  Pass(const Spec& s, const Dims& d, const Inputs<T>& in, int64_t dir)
      : s_(s), S_(d.seq), B_(d.batch), I_(d.input), H_(d.hidden), D_(d.dirs), dir_(dir), in_(in) {
    GH_ = s.gates * H_;
    w_ = in.w + dir * GH_ * I_;
    r_ = in.r + dir * GH_ * H_;
    if (in.b) {
      wb_ = in.b + dir * 2 * GH_;
      rb_ = wb_ + GH_;
    }
    if (in.p) p_ = in.p + dir * 3 * H_;
  }

  void run(const Outputs<T>& out, Tape<T>* tape);
  void back(const Grads<T>& g, const Tape<T>& tape);

 private:
  int64_t time(int64_t k) const { return s_.reversed(dir_) ? S_ - 1 - k : k; }
  int64_t len(int64_t b) const { return in_.lens ? in_.lens[b] : S_; }
  int64_t x_row(int64_t t, int64_t b) const { return s_.layout == 0 ? t * B_ + b : b * S_ + t; }
  int64_t y_off(int64_t t, int64_t b) const {
    return s_.layout == 0 ? ((t * D_ + dir_) * B_ + b) * H_ : ((b * S_ + t) * D_ + dir_) * H_;
  }
  int64_t st_off(int64_t b) const { return s_.layout == 0 ? (dir_ * B_ + b) * H_ : (b * D_ + dir_) * H_; }
  // d act(clip(a)) / da, given y = act(clip(a)).
  double slope(const Activation& f, double a, double y) const {
    if (s_.clip && std::abs(a) > *s_.clip) return 0;
    return f.df(a, y);
  }
  void load_state(const T* src, std::vector<T>& dst) const {
    dst.assign(static_cast<size_t>(B_ * H_), T(0));
    if (!src) return;
    for (int64_t b = 0; b < B_; ++b) std::copy_n(src + st_off(b), H_, dst.data() + b * H_);
  }
  void store_state(const std::vector<T>& src, T* dst) const {
    if (!dst) return;
    for (int64_t b = 0; b < B_; ++b) std::copy_n(src.data() + b * H_, H_, dst + st_off(b));
  }
  void step(int64_t t, std::vector<T>& h, std::vector<T>& c, Tape<T>* tape);
  // LSTM: gates, cell and state of one batch row (pre holds X W^T + H R^T + biases on entry).
  void lstm_cell(T* pre, T* act, T* cb, T* hb, T* tmp) const;
  // GRU's second phase for one row: the candidate h~ and the new state.
  void gru_candidate(int64_t t, int64_t b, T* hb, Tape<T>* tape);
  void back_step(int64_t t, const Tape<T>& tape, std::vector<T>& dh, std::vector<T>& dc);
  // One batch row's slice of the tape at step t.
  struct Row {
    const T *pre, *act, *hprev, *cprev, *cell, *q;
  };
  Row tape_row(const Tape<T>& tape, int64_t t, int64_t b) const {
    const size_t g = static_cast<size_t>((t * B_ + b) * GH_), h = static_cast<size_t>((t * B_ + b) * H_);
    const auto at = [&](const std::vector<T>& v, size_t i) { return v.empty() ? nullptr : v.data() + i; };
    return {at(tape.pre, g), at(tape.act, g), at(tape.hprev, h), at(tape.cprev, h), at(tape.cell, h), at(tape.q, h)};
  }
  void lstm_cell_back(const Row& row, const T* dhb, T* dcb, T* dax, T* dar, T* hc) const;
  void gru_cell_back(const Row& row, const T* dhb, T* dax, T* dar, T* carry) const;
  void gru_reset_back(int64_t t, const Tape<T>& tape);

  const Spec& s_;
  int64_t S_, B_, I_, H_, D_, dir_, GH_ = 0;
  const Inputs<T>& in_;
  const T* w_ = nullptr;
  const T* r_ = nullptr;
  const T* wb_ = nullptr;
  const T* rb_ = nullptr;
  const T* p_ = nullptr;
  RecurrentProduct<T>* hr_product_ = nullptr;  // run()'s H_prev R^T, for its steps
  RecurrentProduct<T>* dh_product_ = nullptr;  // back()'s dA_R R
  std::vector<T> xw_;                          // [S*B, G*H] X W^T + biases, rows in X's order
  std::vector<T> hr_;                          // [B, G*H] H_prev R^T
  std::vector<T> hq_;                          // GRU without linear_before_reset: [B, H] (r (.) H_prev) Rh^T
  std::vector<T> pre_;                         // [B, G*H] this step's pre-activations
  std::vector<T> act_;                         // [B, G*H] this step's gates
  std::vector<T> q_;                           // GRU: [B, H]
  std::vector<T> dax_;                         // [S*B, G*H] gradient of the X-side pre-activations, rows in X's order
  std::vector<T> dar_;                         // [S*B, G*H] gradient of the R-side pre-activations, rows t*B + b
  std::vector<T> carry_;                       // [B, H] gradient reaching H_prev other than through R
  std::vector<T> tmp_;                         // [B, H]
  Outputs<T> out_;
  const T* in_dy_ = nullptr;  // dY of the backward pass, null when no gradient reaches Y
};

template <class T>
void Pass<T>::run(const Outputs<T>& out, Tape<T>* tape) {
  out_ = out;
  const int64_t H = H_, GH = GH_, rows = S_ * B_;
  const bool gru_lbr = s_.kind == Kind::Gru && s_.linear_before_reset;
  xw_.assign(static_cast<size_t>(rows * GH), T(0));
  gemm<T>({false, true, rows, GH, I_, I_, I_, GH}, in_.x, w_, T(0), xw_.data());
  if (wb_)
    parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < GH; ++j) xw_[size_t(r * GH + j)] += wb_[j] + (gru_lbr && j >= 2 * H ? T(0) : rb_[j]);
    });
  std::vector<T> h, c;
  load_state(in_.h0, h);
  if (s_.kind == Kind::Lstm) load_state(in_.c0, c);
  hr_.assign(static_cast<size_t>(B_ * GH), T(0));
  pre_.assign(hr_.size(), T(0));
  act_.assign(hr_.size(), T(0));
  if (s_.kind == Kind::Gru) {
    q_.assign(static_cast<size_t>(B_ * H), T(0));
    hq_.assign(q_.size(), T(0));
  }
  if (tape) {
    const size_t gates = static_cast<size_t>(S_ * B_ * GH), states = static_cast<size_t>(S_ * B_ * H);
    tape->pre.assign(gates, T(0));
    tape->act.assign(gates, T(0));
    tape->hprev.assign(states, T(0));
    if (s_.kind == Kind::Lstm) {
      tape->cprev.assign(states, T(0));
      tape->cell.assign(states, T(0));
    }
    if (s_.kind == Kind::Gru) tape->q.assign(states, T(0));
  }
  const int64_t n_rec = s_.kind == Kind::Gru && !s_.linear_before_reset ? 2 * H : GH;  // Rh waits for r
  RecurrentProduct<T> hr({false, true, B_, n_rec, H, H, H, GH}, r_, S_);
  hr_product_ = &hr;
  for (int64_t k = 0; k < S_; ++k) step(time(k), h, c, tape);
  hr_product_ = nullptr;
  store_state(h, out.yh);
  if (s_.kind == Kind::Lstm) store_state(c, out.yc);
}

template <class T>
void Pass<T>::step(int64_t t, std::vector<T>& h, std::vector<T>& c, Tape<T>* tape) {
  const int64_t H = H_, GH = GH_;
  const size_t st = static_cast<size_t>(t * B_ * H);
  if (tape) {
    std::copy(h.begin(), h.end(), tape->hprev.begin() + st);
    if (s_.kind == Kind::Lstm) std::copy(c.begin(), c.end(), tape->cprev.begin() + st);
  }
  const bool gru = s_.kind == Kind::Gru, lbr = s_.linear_before_reset;
  const int64_t n_rec = gru && !lbr ? 2 * H : GH;  // without linear_before_reset, Rh waits for r
  hr_product_->run(h.data(), hr_.data());
  const auto active = [&](int64_t b) { return t < len(b); };
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, GH));
  // Phase 1: every gate but GRU's h; RNN and LSTM finish here.
  parallel_for(B_, grain, [&](int64_t b0, int64_t b1) {
    std::vector<T> tmp(static_cast<size_t>(H));
    for (int64_t b = b0; b < b1; ++b) {
      T* y = out_.y ? out_.y + y_off(t, b) : nullptr;
      if (!active(b)) {
        if (y) std::fill_n(y, H, T(0));
        continue;
      }
      const T* xw = xw_.data() + x_row(t, b) * GH;
      const T* hr = hr_.data() + b * GH;
      T* pre = pre_.data() + b * GH;
      T* act = act_.data() + b * GH;
      T* hb = h.data() + b * H;
      for (int64_t j = 0; j < n_rec; ++j) pre[j] = xw[j] + hr[j];
      if (s_.kind == Kind::Rnn) {
        activate(s_.act(dir_, 0), s_.clip, pre, act, H);
        std::copy_n(act, H, hb);
      } else if (s_.kind == Kind::Lstm) {
        lstm_cell(pre, act, c.data() + b * H, hb, tmp.data());
      } else {
        T* q = q_.data() + b * H;
        activate(s_.act(dir_, 0), s_.clip, pre, act, 2 * H);
        for (int64_t j = 0; j < H; ++j) q[j] = lbr ? hr[2 * H + j] + (rb_ ? rb_[2 * H + j] : T(0)) : act[H + j] * hb[j];
      }
      if (tape) {
        std::copy_n(pre, GH, tape->pre.data() + (t * B_ + b) * GH);
        if (s_.kind != Kind::Gru) std::copy_n(act, GH, tape->act.data() + (t * B_ + b) * GH);
        if (s_.kind == Kind::Lstm) std::copy_n(c.data() + b * H, H, tape->cell.data() + st + b * H);
      }
      if (y && !gru) std::copy_n(hb, H, y);
    }
  });
  if (!gru) return;
  // Phase 2 (GRU): the candidate h~ and the new state.
  if (!lbr) gemm<T>({false, true, B_, H, H, H, H, H}, q_.data(), r_ + 2 * H * H, T(0), hq_.data());
  parallel_for(B_, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      if (active(b)) gru_candidate(t, b, h.data() + b * H, tape);
  });
}

template <class T>
void Pass<T>::lstm_cell(T* pre, T* act, T* cb, T* hb, T* tmp) const {
  const int64_t H = H_;
  const Activation &f = s_.act(dir_, 0), &g = s_.act(dir_, 1), &hf = s_.act(dir_, 2);
  if (p_)
    for (int64_t j = 0; j < H; ++j) {
      pre[j] += p_[j] * cb[j];                  // i
      pre[2 * H + j] += p_[2 * H + j] * cb[j];  // f
    }
  activate(f, s_.clip, pre, act, H);  // i
  if (s_.input_forget)
    for (int64_t j = 0; j < H; ++j) act[2 * H + j] = T(1) - act[j];
  else activate(f, s_.clip, pre + 2 * H, act + 2 * H, H);  // f
  activate(g, s_.clip, pre + 3 * H, act + 3 * H, H);       // c
  for (int64_t j = 0; j < H; ++j) cb[j] = act[2 * H + j] * cb[j] + act[j] * act[3 * H + j];
  if (p_)
    for (int64_t j = 0; j < H; ++j) pre[H + j] += p_[H + j] * cb[j];  // o
  activate(f, s_.clip, pre + H, act + H, H);
  activate(hf, std::nullopt, cb, tmp, H);  // the cell is not clipped before h, as in ONNX Runtime
  for (int64_t j = 0; j < H; ++j) hb[j] = act[H + j] * tmp[j];
}

template <class T>
void Pass<T>::gru_candidate(int64_t t, int64_t b, T* hb, Tape<T>* tape) {
  const int64_t H = H_, GH = GH_;
  const bool lbr = s_.linear_before_reset;
  const Activation& g = s_.act(dir_, 1);
  const size_t st = static_cast<size_t>(t * B_ * H);
  const T* xw = xw_.data() + x_row(t, b) * GH;
  T* pre = pre_.data() + b * GH;
  T* act = act_.data() + b * GH;
  const T* q = q_.data() + b * H;
  for (int64_t j = 0; j < H; ++j)
    pre[2 * H + j] = lbr ? xw[2 * H + j] + act[H + j] * q[j] : xw[2 * H + j] + hq_[size_t(b * H + j)];
  activate(g, s_.clip, pre + 2 * H, act + 2 * H, H);
  for (int64_t j = 0; j < H; ++j) hb[j] = (T(1) - act[j]) * act[2 * H + j] + act[j] * hb[j];
  if (tape) {
    std::copy_n(pre, GH, tape->pre.data() + (t * B_ + b) * GH);
    std::copy_n(act, GH, tape->act.data() + (t * B_ + b) * GH);
    std::copy_n(q, H, tape->q.data() + st + b * H);
  }
  if (out_.y) std::copy_n(hb, H, out_.y + y_off(t, b));
}

template <class T>
void Pass<T>::back(const Grads<T>& g, const Tape<T>& tape) {
  const int64_t H = H_, GH = GH_, rows = S_ * B_;
  in_dy_ = g.dy;
  std::vector<T> dh, dc;
  load_state(g.dyh, dh);
  if (s_.kind == Kind::Lstm) load_state(g.dyc, dc);
  dax_.assign(static_cast<size_t>(rows * GH), T(0));
  dar_.assign(dax_.size(), T(0));
  carry_.assign(static_cast<size_t>(B_ * H), T(0));
  tmp_.assign(carry_.size(), T(0));
  const int64_t n_rec = s_.kind == Kind::Gru && !s_.linear_before_reset ? 2 * H_ : GH_;
  RecurrentProduct<T> dr({false, false, B_, H_, n_rec, GH_, H_, H_}, r_, S_);  // dA_R R, to H_prev
  dh_product_ = &dr;
  for (int64_t k = S_ - 1; k >= 0; --k) back_step(time(k), tape, dh, dc);
  dh_product_ = nullptr;
  store_state(dh, g.dh0);
  if (s_.kind == Kind::Lstm) store_state(dc, g.dc0);

  const bool gru_split = s_.kind == Kind::Gru && !s_.linear_before_reset;
  if (g.dw) gemm<T>({true, false, GH, I_, rows, GH, I_, I_}, dax_.data(), in_.x, T(0), g.dw + dir_ * GH * I_);
  if (g.dx) gemm<T>({false, false, rows, I_, GH, GH, I_, I_}, dax_.data(), w_, T(dir_ == 0 ? 0 : 1), g.dx);
  if (g.dr) {
    T* dr = g.dr + dir_ * GH * H;
    const int64_t n_prev = gru_split ? 2 * H : GH;
    gemm<T>({true, false, n_prev, H, rows, GH, H, H}, dar_.data(), tape.hprev.data(), T(0), dr);
    if (gru_split)
      gemm<T>({true, false, H, H, rows, GH, H, H}, dar_.data() + 2 * H, tape.q.data(), T(0), dr + 2 * H * H);
  }
  if (g.db) {
    T* db = g.db + dir_ * 2 * GH;
    std::vector<double> sx(static_cast<size_t>(GH), 0.0), sr(sx.size(), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < GH; ++j) {
        sx[size_t(j)] += double(dax_[size_t(r * GH + j)]);
        sr[size_t(j)] += double(dar_[size_t(r * GH + j)]);
      }
    for (int64_t j = 0; j < GH; ++j) {
      db[j] = T(sx[size_t(j)]);
      db[GH + j] = T(sr[size_t(j)]);
    }
  }
  if (g.dp) {
    T* dp = g.dp + dir_ * 3 * H;
    std::vector<double> acc(static_cast<size_t>(3 * H), 0.0);  // i, o, f
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < H; ++j) {
        const T* da = dar_.data() + r * GH;
        acc[size_t(j)] += double(da[j]) * double(tape.cprev[size_t(r * H + j)]);
        acc[size_t(H + j)] += double(da[H + j]) * double(tape.cell[size_t(r * H + j)]);
        acc[size_t(2 * H + j)] += double(da[2 * H + j]) * double(tape.cprev[size_t(r * H + j)]);
      }
    for (int64_t j = 0; j < 3 * H; ++j) dp[j] = T(acc[size_t(j)]);
  }
}

template <class T>
void Pass<T>::back_step(int64_t t, const Tape<T>& tape, std::vector<T>& dh, std::vector<T>& dc) {
  const int64_t H = H_, GH = GH_;
  const bool lbr = s_.linear_before_reset;
  const auto active = [&](int64_t b) { return t < len(b); };
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, GH));
  T* dar_t = dar_.data() + t * B_ * GH;
  parallel_for(B_, grain, [&](int64_t b0, int64_t b1) {
    std::vector<T> tmp(static_cast<size_t>(H));
    for (int64_t b = b0; b < b1; ++b) {
      if (!active(b)) continue;
      T* dhb = dh.data() + b * H;
      if (in_dy_) {
        const T* dy = in_dy_ + y_off(t, b);
        for (int64_t j = 0; j < H; ++j) dhb[j] += dy[j];
      }
      const Row row = tape_row(tape, t, b);
      T* dax = dax_.data() + x_row(t, b) * GH;
      T* dar = dar_t + b * GH;
      T* carry = carry_.data() + b * H;
      if (s_.kind == Kind::Rnn) {
        const Activation& f = s_.act(dir_, 0);
        for (int64_t j = 0; j < H; ++j) dax[j] = dar[j] = T(double(dhb[j]) * slope(f, row.pre[j], row.act[j]));
        std::fill_n(carry, H, T(0));
      } else if (s_.kind == Kind::Lstm) {
        lstm_cell_back(row, dhb, dc.data() + b * H, dax, dar, tmp.data());
        std::fill_n(carry, H, T(0));
      } else {
        gru_cell_back(row, dhb, dax, dar, carry);
      }
    }
  });
  if (s_.kind == Kind::Gru && !lbr) gru_reset_back(t, tape);
  dh_product_->run(dar_t, tmp_.data());
  for (int64_t b = 0; b < B_; ++b) {
    if (!active(b)) continue;
    for (int64_t j = 0; j < H; ++j) dh[size_t(b * H + j)] = tmp_[size_t(b * H + j)] + carry_[size_t(b * H + j)];
  }
}

template <class T>
void Pass<T>::lstm_cell_back(const Row& row, const T* dhb, T* dcb, T* dax, T* dar, T* hcs) const {
  const int64_t H = H_;
  const Activation &f = s_.act(dir_, 0), &g = s_.act(dir_, 1), &hf = s_.act(dir_, 2);
  const T *pre = row.pre, *act = row.act, *cp = row.cprev, *cell = row.cell;
  activate(hf, std::nullopt, cell, hcs, H);  // h(C), as the forward computed it (no clip)
  for (int64_t j = 0; j < H; ++j) {
    const double i = act[j], o = act[H + j], fg = act[2 * H + j], cc = act[3 * H + j];
    const double hc = hcs[j];
    const double dA_o = double(dhb[j]) * hc * slope(f, pre[H + j], o);
    double dct = double(dcb[j]) + double(dhb[j]) * o * hf.df(cell[j], hc);
    if (p_) dct += dA_o * p_[H + j];
    double di = dct * cc;
    const double dfg = dct * double(cp[j]);
    double dA_f = 0;
    if (s_.input_forget) di -= dfg;
    else dA_f = dfg * slope(f, pre[2 * H + j], fg);
    const double dA_i = di * slope(f, pre[j], i);
    const double dA_c = dct * i * slope(g, pre[3 * H + j], cc);
    double dcp = dct * fg;
    if (p_) dcp += dA_i * p_[j] + dA_f * p_[2 * H + j];
    dcb[j] = T(dcp);
    dax[j] = dar[j] = T(dA_i);
    dax[H + j] = dar[H + j] = T(dA_o);
    dax[2 * H + j] = dar[2 * H + j] = T(dA_f);
    dax[3 * H + j] = dar[3 * H + j] = T(dA_c);
  }
}

template <class T>
void Pass<T>::gru_cell_back(const Row& row, const T* dhb, T* dax, T* dar, T* carry) const {
  const int64_t H = H_;
  const bool lbr = s_.linear_before_reset;
  const Activation &f = s_.act(dir_, 0), &g = s_.act(dir_, 1);
  const T *pre = row.pre, *act = row.act, *hp = row.hprev, *q = row.q;
  for (int64_t j = 0; j < H; ++j) {
    const double z = act[j], r = act[H + j], ht = act[2 * H + j], d = dhb[j];
    const double dA_z = d * (double(hp[j]) - ht) * slope(f, pre[j], z);
    const double dA_h = d * (1 - z) * slope(g, pre[2 * H + j], ht);
    carry[j] = T(d * z);
    dax[j] = dar[j] = T(dA_z);
    dax[2 * H + j] = T(dA_h);
    dar[2 * H + j] = T(lbr ? dA_h * r : dA_h);
    if (lbr) dax[H + j] = dar[H + j] = T(dA_h * double(q[j]) * slope(f, pre[H + j], r));
  }
}

// GRU without linear_before_reset: d(r (.) H_prev) = dA_h Rh feeds r's gate and H_prev.
template <class T>
void Pass<T>::gru_reset_back(int64_t t, const Tape<T>& tape) {
  const int64_t H = H_, GH = GH_;
  T* dar_t = dar_.data() + t * B_ * GH;
  gemm<T>({false, false, B_, H, H, GH, H, H}, dar_t + 2 * H, r_ + 2 * H * H, T(0), tmp_.data());
  const Activation& f = s_.act(dir_, 0);
  for (int64_t b = 0; b < B_; ++b) {
    if (t >= len(b)) continue;
    const Row row = tape_row(tape, t, b);
    T* dax = dax_.data() + x_row(t, b) * GH;
    T* dar = dar_t + b * GH;
    for (int64_t j = 0; j < H; ++j) {
      const double drh = tmp_[size_t(b * H + j)], r = row.act[H + j];
      dax[H + j] = dar[H + j] = T(drh * double(row.hprev[j]) * slope(f, row.pre[H + j], r));
      carry_[size_t(b * H + j)] += T(drh * r);
    }
  }
}

}  // namespace

template <class T>
void forward(const Spec& s, const Dims& d, const Inputs<T>& in, const Outputs<T>& out) {
  check_lengths(s, d, in.lens);
  for (int64_t dir = 0; dir < d.dirs; ++dir) Pass<T>(s, d, in, dir).run(out, nullptr);
}

template <class T>
void backward(const Spec& s, const Dims& d, const Inputs<T>& in, const Grads<T>& g) {
  check_lengths(s, d, in.lens);
  for (int64_t dir = 0; dir < d.dirs; ++dir) {
    Tape<T> tape;
    Pass<T> pass(s, d, in, dir);
    pass.run(Outputs<T>{}, &tape);
    pass.back(g, tape);
  }
}

template void forward<float>(const Spec&, const Dims&, const Inputs<float>&, const Outputs<float>&);
template void forward<double>(const Spec&, const Dims&, const Inputs<double>&, const Outputs<double>&);
template void backward<float>(const Spec&, const Dims&, const Inputs<float>&, const Grads<float>&);
template void backward<double>(const Spec&, const Dims&, const Inputs<double>&, const Grads<double>&);

}  // namespace kiln::rnn
