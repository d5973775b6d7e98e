// Recurrent layers as loops of matrix products: the reference implementation of
// Backend::rnn_forward / rnn_backward for the CPU. It runs every f64 call (oneDNN's
// RNN primitives have no f64, and this is what the f64 finite-difference checks
// test), and f32 when rnn_use_loops(true) (for comparing against oneDNN).
//
// Shape of the work: the input projections of all steps in one product,
// GI [T B, G H] = X [T B, I] W_ih^T + b_ih; then per step GH [B, G H] = h W_hh^T + b_hh
// and the gate arithmetic. Backward walks the steps in reverse, writing the gate
// gradients of every step (dGI, and dGH where they differ: GRU's n gate), then three
// tall products give gX, gW_ih and gW_hh.
//
// Workspace (elements of the dtype): LSTM: the activated gates [T, B, 4H] then the
// cell states [T, B, H]; GRU: the activated gates r, z, n [T, B, 3H] then the hidden
// projections of n, W_hn h + b_hn [T, B, H]; RNN: nothing (h is y).
#include <cmath>
#include <cstring>

#include "cpu_backend.h"
#include "dnnl_common.h"
#include "loops.h"

namespace reel::cpu {
namespace {

// [rows, cols] view of t's storage at element offset `off` (from t's own offset), as the
// [1, rows, cols] operand matmul_into takes; rs, cs: row and column strides.
Tensor mat(const Tensor& t, int64_t off, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  return view_of(t, {1, rows, cols}, {rows * rs + cols * cs, rs, cs}, t.offset() + off);
}
Tensor dense_mat(const Tensor& t, int64_t off, int64_t rows, int64_t cols) { return mat(t, off, rows, cols, cols, 1); }
// W [rows, cols] contiguous, seen as W^T [cols, rows]
Tensor transposed(const Tensor& w) { return mat(w, 0, w.size(1), w.size(0), 1, w.size(1)); }

void mm(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias = {}) {
  matmul_into({.out = out, .a = a, .b = b, .bias = bias, .row_bias = {}, .relu = false});
}

template <typename T> T sigm(T x) { return T(1) / (T(1) + std::exp(-x)); }

template <typename T>
struct Layer {
  const RnnParams& p;
  int64_t T_, B, I, H, G;
  Layer(const RnnParams& p) : p(p), T_(p.T), B(p.B), I(p.I), H(p.H), G(rnn_gates(p.mode)) {}
  int64_t step_time(int64_t s) const { return p.reverse ? T_ - 1 - s : s; }
  int64_t gates_elems() const { return p.mode == RnnMode::lstm || p.mode == RnnMode::gru ? T_ * B * G * H : 0; }
  int64_t extra_elems() const { return p.mode == RnnMode::lstm || p.mode == RnnMode::gru ? T_ * B * H : 0; }
  bool parallel() const { return B * H * G >= 4096; }

  // One step's gate arithmetic: gi, gh [B, G H] rows; h_prev [B, H]; writes h (a row of y),
  // and the LSTM cell / the saved gates.
  void cell_forward(const T* gi, const T* gh, const T* h_prev, const T* c_prev, T* h, T* c, T* gates,
                    T* hn) const {
    const int64_t H_ = H, GH = G * H;
    const RnnMode mode = p.mode;
#pragma omp parallel for schedule(static) if (parallel())
    for (int64_t b = 0; b < B; ++b) {
      const T* a = gi + b * GH;
      const T* r = gh + b * GH;
      for (int64_t j = 0; j < H_; ++j) {
        int64_t k = b * H_ + j;
        switch (mode) {
          case RnnMode::rnn_tanh: h[k] = std::tanh(a[j] + r[j]); break;
          case RnnMode::rnn_relu: h[k] = std::max(a[j] + r[j], T(0)); break;
          case RnnMode::lstm: {
            T ig = sigm(a[j] + r[j]), fg = sigm(a[H_ + j] + r[H_ + j]);
            T gg = std::tanh(a[2 * H_ + j] + r[2 * H_ + j]), og = sigm(a[3 * H_ + j] + r[3 * H_ + j]);
            T cn = fg * c_prev[k] + ig * gg;
            c[k] = cn;
            h[k] = og * std::tanh(cn);
            T* s = gates + b * GH;
            s[j] = ig, s[H_ + j] = fg, s[2 * H_ + j] = gg, s[3 * H_ + j] = og;
            break;
          }
          case RnnMode::gru: {
            T rg = sigm(a[j] + r[j]), zg = sigm(a[H_ + j] + r[H_ + j]);
            T hproj = r[2 * H_ + j];
            T ng = std::tanh(a[2 * H_ + j] + rg * hproj);
            h[k] = (T(1) - zg) * ng + zg * h_prev[k];
            T* s = gates + b * GH;
            s[j] = rg, s[H_ + j] = zg, s[2 * H_ + j] = ng;
            hn[k] = hproj;
            break;
          }
        }
      }
    }
  }

  // One step backward. dh [B, H]: the gradient reaching h (from y and the later step),
  // dc the LSTM cell's (updated in place to dc_prev). Writes the gate gradients dgi (and
  // dgh for GRU; else dgh == dgi) and, for GRU, the direct part z dh of dh_prev into direct.
  void cell_backward(const T* dh, T* dc, const T* h, const T* h_prev, const T* c, const T* c_prev, const T* gates,
                     const T* hn, T* dgi, T* dgh, T* direct) const {
    const int64_t H_ = H, GH = G * H;
    const RnnMode mode = p.mode;
#pragma omp parallel for schedule(static) if (parallel())
    for (int64_t b = 0; b < B; ++b) {
      T* da = dgi + b * GH;
      for (int64_t j = 0; j < H_; ++j) {
        int64_t k = b * H_ + j;
        T d = dh[k];
        switch (mode) {
          case RnnMode::rnn_tanh: da[j] = d * (T(1) - h[k] * h[k]); break;
          case RnnMode::rnn_relu: da[j] = h[k] > T(0) ? d : T(0); break;
          case RnnMode::lstm: {
            const T* s = gates + b * GH;
            T ig = s[j], fg = s[H_ + j], gg = s[2 * H_ + j], og = s[3 * H_ + j];
            T tc = std::tanh(c[k]);
            T dcn = dc[k] + d * og * (T(1) - tc * tc);
            da[j] = dcn * gg * ig * (T(1) - ig);
            da[H_ + j] = dcn * c_prev[k] * fg * (T(1) - fg);
            da[2 * H_ + j] = dcn * ig * (T(1) - gg * gg);
            da[3 * H_ + j] = d * tc * og * (T(1) - og);
            dc[k] = dcn * fg;
            break;
          }
          case RnnMode::gru: {
            const T* s = gates + b * GH;
            T rg = s[j], zg = s[H_ + j], ng = s[2 * H_ + j];
            T dn = d * (T(1) - zg) * (T(1) - ng * ng);
            T dz = d * (h_prev[k] - ng) * zg * (T(1) - zg);
            T dr = dn * hn[k] * rg * (T(1) - rg);
            T* dr_h = dgh + b * GH;
            da[j] = dr, da[H_ + j] = dz, da[2 * H_ + j] = dn;
            dr_h[j] = dr, dr_h[H_ + j] = dz, dr_h[2 * H_ + j] = dn * rg;
            direct[k] = d * zg;
            break;
          }
        }
      }
    }
  }
};

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// the column sums of a [rows, cols] contiguous block into out [cols]
template <typename T>
void column_sums(T* out, const T* m, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelGrain)
  for (int64_t j = 0; j < cols; ++j) {
    T s = 0;
    for (int64_t r = 0; r < rows; ++r) s += m[r * cols + j];
    out[j] = s;
  }
}

template <typename T>
void forward(const RnnParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy, const Tensor& ws_in,
             const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& w_ih, const Tensor& w_hh,
             const Tensor& b_ih, const Tensor& b_hh) {
  Layer<T> L(p);
  const int64_t TB = L.T_ * L.B, GH = L.G * L.H, BH = L.B * L.H;
  Options opt{.dtype = y.dtype()};
  Tensor ws = ws_in.defined() && ws_in.numel() ? ws_in
                                               : empty({(L.gates_elems() + L.extra_elems()) * int64_t(sizeof(T))},
                                                       {.dtype = DType::u8});
  T* gates = ptr<T>(ws);
  T* extra = gates ? gates + L.gates_elems() : nullptr;
  Tensor gi = empty({TB, GH}, opt), gh = empty({L.B, GH}, opt);
  mm(dense_mat(gi, 0, TB, GH), dense_mat(x, 0, TB, L.I), transposed(w_ih), b_ih);
  T* Y = ptr<T>(y);
  int64_t t_prev = -1;
  for (int64_t s = 0; s < L.T_; ++s) {
    int64_t t = L.step_time(s);
    const T* h_prev = s == 0 ? ptr<T>(hx) : Y + t_prev * BH;
    if (s == 0) mm(dense_mat(gh, 0, L.B, GH), dense_mat(hx, 0, L.B, L.H), transposed(w_hh), b_hh);
    else mm(dense_mat(gh, 0, L.B, GH), dense_mat(y, t_prev * BH, L.B, L.H), transposed(w_hh), b_hh);
    const T* c_prev = p.mode != RnnMode::lstm ? nullptr : s == 0 ? ptr<T>(cx) : extra + t_prev * BH;
    L.cell_forward(ptr<T>(gi) + t * L.B * GH, ptr<T>(gh), h_prev, c_prev, Y + t * BH,
                   p.mode == RnnMode::lstm ? extra + t * BH : nullptr, gates ? gates + t * L.B * GH : nullptr,
                   p.mode == RnnMode::gru ? extra + t * BH : nullptr);
    t_prev = t;
  }
  std::memcpy(ptr<T>(hy), Y + t_prev * BH, size_t(BH) * sizeof(T));
  if (p.mode == RnnMode::lstm) std::memcpy(ptr<T>(cy), extra + t_prev * BH, size_t(BH) * sizeof(T));
}

template <typename T>
void backward(const RnnParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx, const Tensor& gw_ih,
              const Tensor& gw_hh, const Tensor& gb_ih, const Tensor& gb_hh, const Tensor& gy, const Tensor& ghy,
              const Tensor& gcy, const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& w_ih,
              const Tensor& w_hh, const Tensor& y, const Tensor& ws) {
  Layer<T> L(p);
  const int64_t TB = L.T_ * L.B, GH = L.G * L.H, BH = L.B * L.H;
  Options opt{.dtype = y.dtype()};
  const T* gates = ptr<T>(ws);
  const T* extra = gates ? gates + L.gates_elems() : nullptr;
  const bool gru = p.mode == RnnMode::gru, lstm = p.mode == RnnMode::lstm;
  Tensor dgi = empty({TB, GH}, opt);
  Tensor dgh = gru ? empty({TB, GH}, opt) : dgi;
  Tensor dh = empty({L.B, L.H}, opt), direct = gru ? empty({L.B, L.H}, opt) : Tensor();
  Tensor dsum = empty({L.B, L.H}, opt);
  // h_prev of every step, in time order: the state each step read, for gW_hh
  Tensor hprev = empty({L.T_, L.B, L.H}, opt);
  const T* Y = ptr<T>(y);
  T* HP = ptr<T>(hprev);
  for (int64_t s = 0; s < L.T_; ++s) {
    int64_t t = L.step_time(s);
    const T* src = s == 0 ? ptr<T>(hx) : Y + L.step_time(s - 1) * BH;
    std::memcpy(HP + t * BH, src, size_t(BH) * sizeof(T));
  }
  std::memcpy(ptr<T>(dh), ptr<T>(ghy), size_t(BH) * sizeof(T));
  if (lstm) std::memcpy(ptr<T>(gcx), ptr<T>(gcy), size_t(BH) * sizeof(T));
  const T* GY = ptr<T>(gy);
  for (int64_t s = L.T_ - 1; s >= 0; --s) {
    int64_t t = L.step_time(s);
    T* d = ptr<T>(dsum);
    const T* dhp = ptr<T>(dh);
    for (int64_t k = 0; k < BH; ++k) d[k] = dhp[k] + GY[t * BH + k];
    const T* c_prev = !lstm ? nullptr : s == 0 ? ptr<T>(cx) : extra + L.step_time(s - 1) * BH;
    L.cell_backward(d, lstm ? ptr<T>(gcx) : nullptr, Y + t * BH, HP + t * BH, lstm ? extra + t * BH : nullptr,
                    c_prev, gates ? gates + t * L.B * GH : nullptr, gru ? extra + t * BH : nullptr,
                    ptr<T>(dgi) + t * L.B * GH, gru ? ptr<T>(dgh) + t * L.B * GH : nullptr, ptr<T>(direct));
    // dh_prev = dGH_t W_hh (+ z dh for GRU)
    mm(dense_mat(dh, 0, L.B, L.H), dense_mat(dgh, t * L.B * GH, L.B, GH), dense_mat(w_hh, 0, GH, L.H));
    if (gru) {
      T* o = ptr<T>(dh);
      const T* z = ptr<T>(direct);
      for (int64_t k = 0; k < BH; ++k) o[k] += z[k];
    }
  }
  std::memcpy(ptr<T>(ghx), ptr<T>(dh), size_t(BH) * sizeof(T));
  mm(dense_mat(gx, 0, TB, L.I), dense_mat(dgi, 0, TB, GH), dense_mat(w_ih, 0, GH, L.I));
  mm(dense_mat(gw_ih, 0, GH, L.I), mat(dgi, 0, GH, TB, 1, GH), dense_mat(x, 0, TB, L.I));
  mm(dense_mat(gw_hh, 0, GH, L.H), mat(dgh, 0, GH, TB, 1, GH), dense_mat(hprev, 0, TB, L.H));
  if (gb_ih.defined()) column_sums(ptr<T>(gb_ih), ptr<T>(dgi), TB, GH);
  if (gb_hh.defined()) column_sums(ptr<T>(gb_hh), ptr<T>(dgh), TB, GH);
}

}  // namespace

int64_t rnn_loops_workspace_bytes(const RnnParams& p, DType dtype) {
  int64_t G = rnn_gates(p.mode);
  int64_t per = p.mode == RnnMode::lstm || p.mode == RnnMode::gru ? p.T * p.B * (G + 1) * p.H : 0;
  return per * int64_t(dtype_size(dtype));
}

void rnn_loops_forward(const RnnParams& p, const Tensor& y, const Tensor& hy, const Tensor& cy, const Tensor& ws,
                       const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& w_ih, const Tensor& w_hh,
                       const Tensor& b_ih, const Tensor& b_hh) {
  dispatch_float(x.dtype(), "rnn", [&]<typename T>() { forward<T>(p, y, hy, cy, ws, x, hx, cx, w_ih, w_hh, b_ih, b_hh); });
}

void rnn_loops_backward(const RnnParams& p, const Tensor& gx, const Tensor& ghx, const Tensor& gcx,
                        const Tensor& gw_ih, const Tensor& gw_hh, const Tensor& gb_ih, const Tensor& gb_hh,
                        const Tensor& gy, const Tensor& ghy, const Tensor& gcy, const Tensor& x, const Tensor& hx,
                        const Tensor& cx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& y,
                        const Tensor& ws) {
  dispatch_float(x.dtype(), "rnn_backward", [&]<typename T>() {
    backward<T>(p, gx, ghx, gcx, gw_ih, gw_hh, gb_ih, gb_hh, gy, ghy, gcy, x, hx, cx, w_ih, w_hh, y, ws);
  });
}

}  // namespace reel::cpu
