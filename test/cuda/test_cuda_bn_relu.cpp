// batch_norm_relu on the GPU by both paths (REEL_CUDA_BN_RELU, cuda::set_bn_relu_path): the
// fused kernels (cuda/norm.cu) against the separate path (batch norm's kernels, then relu)
// and against the CPU, in values, running statistics and every gradient: f32 and f64,
// training and eval, one piece and DenseNet's several (strided ones, more than one launch's
// 32), relu at exactly 0, NaN and inf passing as on the separate path, an empty batch, bf16
// staged, the blocked form, a direct Backend call with gradients wanted for some pieces
// only, and a small dense block trained both ways and replayed from a graph capture.
#include <limits>

#include "compare.h"

using namespace reel;
using cuda_test::close;
using cuda_test::kGpu;
using V = std::vector<Tensor>;

namespace {

struct PathGuard {
  cuda::BnReluPath was = cuda::bn_relu_path();
  ~PathGuard() { cuda::set_bn_relu_path(was); }
};

struct Run {
  Tensor y, rm, rv, gw, gb;
  V gxs;
};

// One forward and backward of batch_norm_relu on `dev` from copies of the CPU pieces `base`
// (each made a leaf there, then `view` applied), of w and b (undefined: none), of the running
// statistics, with upstream gradient g; everything comes back to the CPU.
Run run(const V& base, const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv, const Tensor& g,
        bool training, Device dev, const std::function<Tensor(const Tensor&, size_t)>& view = {}) {
  V leaves, xs;
  for (size_t j = 0; j < base.size(); ++j) {
    leaves.push_back(base[j].detach().to(dev).requires_grad_());
    xs.push_back(view ? view(leaves.back(), j) : leaves.back());
  }
  Tensor wd = w.defined() ? w.detach().to(dev).requires_grad_() : Tensor();
  Tensor bd = b.defined() ? b.detach().to(dev).requires_grad_() : Tensor();
  // clones: to() on the CPU is the same storage, and the forward updates the running statistics in place
  Tensor rmd = rm.detach().clone().to(dev), rvd = rv.detach().clone().to(dev);
  Tensor y = batch_norm_relu(xs, wd, bd, rmd, rvd, training, 0.1, 1e-5);
  (y * g.to(dev)).sum().backward();
  Run r{y.cpu(), rmd.cpu(), rvd.cpu(), wd.defined() ? wd.grad().cpu() : Tensor(),
        bd.defined() ? bd.grad().cpu() : Tensor(), {}};
  for (const Tensor& l : leaves) r.gxs.push_back(l.grad().defined() ? l.grad().cpu() : Tensor());
  return r;
}

// "" when two runs agree within rtol/atol (NaN equals NaN), else the first difference
std::string same(const Run& a, const Run& b, double rtol, double atol) {
  if (std::string d = close(a.y, b.y, rtol, atol); !d.empty()) return "y: " + d;
  if (std::string d = close(a.rm, b.rm, rtol, atol); !d.empty()) return "running_mean: " + d;
  if (std::string d = close(a.rv, b.rv, rtol, atol); !d.empty()) return "running_var: " + d;
  // gradients sum over N and the spatial dims: a looser absolute bound
  if (a.gw.defined() != b.gw.defined() || a.gb.defined() != b.gb.defined()) return "parameter gradients differ";
  if (a.gw.defined())
    if (std::string d = close(a.gw, b.gw, rtol, atol * 10); !d.empty()) return "gw: " + d;
  if (a.gb.defined())
    if (std::string d = close(a.gb, b.gb, rtol, atol * 10); !d.empty()) return "gb: " + d;
  for (size_t j = 0; j < a.gxs.size(); ++j)
    if (std::string d = close(a.gxs[j], b.gxs[j], rtol, atol * 10); !d.empty())
      return "gx of piece " + std::to_string(j) + ": " + d;
  return "";
}

struct Case {
  V pieces;
  Tensor w, b, rm, rv, g;
};
Case make_case(const std::vector<Dims>& shapes, DType dt, bool affine) {
  Case c;
  int64_t C = 0;
  for (const Dims& s : shapes) {
    c.pieces.push_back(randn(s, {.dtype = dt}) * 2.0 + 0.3);
    C += s[1];
  }
  if (affine) c.w = rand({C}, {.dtype = dt}) + 0.5, c.b = rand({C}, {.dtype = dt}) - 0.5;
  c.rm = rand({C}, {.dtype = dt}) - 0.5, c.rv = rand({C}, {.dtype = dt}) + 0.5;
  Dims ys = shapes[0];
  ys[1] = C;
  c.g = randn(ys, {.dtype = dt});
  return c;
}

// The CPU, the separate path and the fused path on one case; the fused path must have run.
void check_case(const Case& c, bool training, double rtol, double atol,
                const std::function<Tensor(const Tensor&, size_t)>& view = {}) {
  Run cpu = run(c.pieces, c.w, c.b, c.rm, c.rv, c.g, training, kCPU, view);
  cuda::set_bn_relu_path(cuda::BnReluPath::separate);
  const uint64_t before = cuda::bn_relu_fused_calls();
  Run sep = run(c.pieces, c.w, c.b, c.rm, c.rv, c.g, training, kGpu, view);
  CHECK(cuda::bn_relu_fused_calls() == before);  // separate: the fused kernels never ran
  cuda::set_bn_relu_path(cuda::BnReluPath::fused);
  Run fus = run(c.pieces, c.w, c.b, c.rm, c.rv, c.g, training, kGpu, view);
  CHECK(cuda::bn_relu_fused_calls() == before + 2);  // its forward and its backward
  CHECK(same(fus, sep, rtol, atol) == "");
  CHECK(same(fus, cpu, rtol * 10, atol * 10) == "");
  CHECK(same(sep, cpu, rtol * 10, atol * 10) == "");
}

}  // namespace

TEST_CASE("fused batch_norm_relu equals the separate path and the CPU, f32 and f64, training and eval",
          "[cuda][norm][bn_relu]") {
  PathGuard guard;
  manual_seed(21);
  for (DType dt : {DType::f32, DType::f64})
    for (bool training : {true, false})
      for (bool affine : {true, false}) {
        INFO(dtype_name(dt) << (training ? " training" : " eval") << (affine ? " affine" : " no affine"));
        const double rtol = dt == DType::f32 ? 1e-5 : 1e-12, atol = dt == DType::f32 ? 1e-6 : 1e-13;
        check_case(make_case({{16, 6, 5, 7}}, dt, affine), training, rtol, atol);  // planes
        check_case(make_case({{64, 10}}, dt, affine), training, rtol, atol);       // S = 1: column sums
        check_case(make_case({{8, 4, 9}}, dt, affine), training, rtol, atol);      // [N, C, L]
        // DenseNet's several pieces of unequal widths, and a one-channel piece
        check_case(make_case({{4, 3, 9, 9}, {4, 1, 9, 9}, {4, 5, 9, 9}}, dt, affine), training, rtol, atol);
        check_case(make_case({{7, 4}, {7, 2}}, dt, affine), training, rtol, atol);
      }
}

TEST_CASE("fused batch_norm_relu reads strided pieces and many pieces where they lie, 32 a launch",
          "[cuda][norm][bn_relu]") {
  PathGuard guard;
  manual_seed(22);
  // a channels-last piece (permuted on the GPU) beside a narrowed one
  Case c = make_case({{3, 4, 4, 4}, {3, 6, 4, 4}}, DType::f32, true);
  c.pieces[0] = randn({3, 4, 4, 4});
  c.pieces[1] = randn({3, 6, 4, 4});
  c.w = rand({7}) + 0.5, c.b = rand({7}) - 0.5, c.rm = zeros({7}), c.rv = ones({7}), c.g = randn({3, 7, 4, 4});
  auto view = [](const Tensor& t, size_t j) {
    return j == 0 ? t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}) : t.narrow(1, 1, 3);
  };
  for (bool training : {true, false}) check_case(c, training, 1e-5, 1e-6, view);
  // a dense block's last norm: 13 pieces, the first wide
  std::vector<Dims> shapes{{2, 64, 8, 8}};
  for (int k = 0; k < 12; ++k) shapes.push_back({2, 32, 8, 8});
  for (bool training : {true, false}) check_case(make_case(shapes, DType::f32, true), training, 1e-5, 1e-6);
  // more pieces than one launch takes (32): two groups
  std::vector<Dims> many(40, Dims{3, 1, 4, 4});
  many[39] = Dims{3, 7, 4, 4};
  for (bool training : {true, false}) check_case(make_case(many, DType::f64, true), training, 1e-12, 1e-13);
}

TEST_CASE("fused batch_norm_relu gives 0 and a zero gradient at exactly 0, as the separate path", "[cuda][norm][bn_relu]") {
  PathGuard guard;
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    // training: each channel symmetric about 0 (mean exactly 0, shift exactly 0), so x = 0
    // normalises to exactly 0: y [3, 2, 1], the zeros at n = 1
    Case c;
    c.pieces = {tensor({-1.0, -2.0, 0.0, 0.0, 1.0, 2.0}, {.dtype = dt}).reshape({3, 2, 1})};
    c.rm = zeros({2}, {.dtype = dt}), c.rv = ones({2}, {.dtype = dt});
    c.g = tensor({5.0, 6.0, 7.0, 8.0, 9.0, 10.0}, {.dtype = dt}).reshape({3, 2, 1});
    check_case(c, true, 1e-6, 1e-7);
    cuda::set_bn_relu_path(cuda::BnReluPath::fused);
    Run r = run(c.pieces, {}, {}, c.rm, c.rv, c.g, true, kGpu);
    std::vector<double> y = r.y.to_vector<double>();
    CHECK(y[2] == 0.0);
    CHECK(y[3] == 0.0);
    CHECK(y[4] > 0.0);
    // eval: x = 0 with a running mean of 0 and no bias gives exactly 0 (scale 0 + 0): its
    // gradient, relu's at 0, is 0; a negative one is 0 too; only the positive one passes
    Case e;
    e.pieces = {tensor({0.0, -1.0, 0.0, 3.0}, {.dtype = dt}).reshape({2, 2})};
    e.rm = zeros({2}, {.dtype = dt}), e.rv = ones({2}, {.dtype = dt});
    e.g = tensor({1.0, 2.0, 3.0, 4.0}, {.dtype = dt}).reshape({2, 2});
    check_case(e, false, 1e-6, 1e-7);
    Run s = run(e.pieces, {}, {}, e.rm, e.rv, e.g, false, kGpu);
    std::vector<double> ys = s.y.to_vector<double>(), gx = s.gxs[0].to_vector<double>();
    CHECK(ys[0] == 0.0);
    CHECK(ys[1] == 0.0);
    CHECK(ys[2] == 0.0);
    CHECK(ys[3] > 0.0);
    CHECK(gx[0] == 0.0);
    CHECK(gx[1] == 0.0);
    CHECK(gx[2] == 0.0);
    CHECK(gx[3] > 0.0);
  }
}

TEST_CASE("fused batch_norm_relu lets NaN and inf through as the separate path does", "[cuda][norm][bn_relu]") {
  PathGuard guard;
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    // y [3, 4] from pieces [3, 2], [3, 1], [3, 1]: NaN at (0, 0) and (0, 2), +inf at (1, 0),
    // -inf at (1, 1); the last channel finite
    Case e;
    e.pieces = {tensor({nan, 1.0, inf, -inf, -1.0, 2.0}, {.dtype = dt}).reshape({3, 2}),
                tensor({nan, -3.0, 4.0}, {.dtype = dt}).reshape({3, 1}),
                tensor({1.0, 2.0, 4.0}, {.dtype = dt}).reshape({3, 1})};
    e.rm = zeros({4}, {.dtype = dt}), e.rv = ones({4}, {.dtype = dt});
    e.w = tensor({1.0, 2.0, 0.5, 1.5}, {.dtype = dt}), e.b = tensor({0.0, 0.1, -0.1, 0.2}, {.dtype = dt});
    e.g = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0}, {.dtype = dt}).reshape({3, 4});
    // eval: NaN stays NaN and passes its gradient; +inf stays, -inf gives 0 and a zero gradient
    check_case(e, false, 1e-6, 1e-7);
    cuda::set_bn_relu_path(cuda::BnReluPath::fused);
    Run r = run(e.pieces, e.w, e.b, e.rm, e.rv, e.g, false, kGpu);
    std::vector<double> y = r.y.to_vector<double>(), gx = r.gxs[0].to_vector<double>();
    CHECK(std::isnan(y[0]));
    CHECK(std::isnan(y[2]));
    CHECK(y[4] == inf);
    CHECK(y[5] == 0.0);
    CHECK(gx[0] != 0.0);  // NaN's gradient passes (g w invstd)
    CHECK(gx[3] == 0.0);  // -inf's is masked
    // training: NaN or inf makes its channel's statistics NaN on every path; the finite channel stays finite
    check_case(e, true, 1e-6, 1e-7);
    Run t = run(e.pieces, e.w, e.b, e.rm, e.rv, e.g, true, kGpu);
    std::vector<double> yt = t.y.to_vector<double>();
    CHECK(std::isfinite(yt[3]));
    CHECK(std::isnan(yt[0]));
  }
}

TEST_CASE("fused batch_norm_relu over an empty batch gives what the separate path gives", "[cuda][norm][bn_relu]") {
  PathGuard guard;
  for (bool training : {true, false}) {
    INFO((training ? "training" : "eval"));
    Case c;
    c.pieces = {zeros({0, 3, 4, 4}), zeros({0, 2, 4, 4})};
    c.w = rand({5}) + 0.5, c.b = rand({5}), c.rm = rand({5}), c.rv = rand({5}) + 0.5, c.g = zeros({0, 5, 4, 4});
    // through the op: no element, so no backend call on either path; parameter gradients 0
    for (cuda::BnReluPath p : {cuda::BnReluPath::separate, cuda::BnReluPath::fused}) {
      cuda::set_bn_relu_path(p);
      Run r = run(c.pieces, c.w, c.b, c.rm, c.rv, c.g, training, kGpu);
      CHECK(r.y.shape() == Dims{0, 5, 4, 4});
      CHECK(r.gw.to_vector<float>() == std::vector<float>(5, 0.0f));
      CHECK(r.gb.to_vector<float>() == std::vector<float>(5, 0.0f));
      CHECK(close(r.rm, c.rm, 0, 0) == "");  // nothing to update from
    }
  }
  // the Backend called directly, eval: save_mean and save_invstd from the running
  // statistics; backward: zero parameter gradients, on both paths
  Backend& be = backend_for(kGpu);
  V xs{zeros({0, 3, 4, 4}, {.device = kGpu}), zeros({0, 2, 4, 4}, {.device = kGpu})};
  Tensor w = (rand({5}) + 0.5).to(kGpu), b = rand({5}).to(kGpu), rm = rand({5}).to(kGpu),
         rv = (rand({5}) + 0.5).to(kGpu);
  V got;
  for (cuda::BnReluPath p : {cuda::BnReluPath::separate, cuda::BnReluPath::fused}) {
    cuda::set_bn_relu_path(p);
    Tensor y = empty({0, 5, 4, 4}, {.device = kGpu}), m = empty({5}, {.device = kGpu}),
           i = empty({5}, {.device = kGpu});
    be.batch_norm_relu_forward(y, m, i, xs, w, b, rm, rv, false, 0.1, 1e-5);
    V gxs{empty({0, 3, 4, 4}, {.device = kGpu}), empty({0, 2, 4, 4}, {.device = kGpu})};
    Tensor gw = full({5}, 7.0, {.device = kGpu}), gb = full({5}, 7.0, {.device = kGpu});
    be.batch_norm_relu_backward(gxs, gw, gb, empty({0, 5, 4, 4}, {.device = kGpu}), xs, y, w, m, i, false);
    CHECK(gw.cpu().to_vector<float>() == std::vector<float>(5, 0.0f));
    CHECK(gb.cpu().to_vector<float>() == std::vector<float>(5, 0.0f));
    got.push_back(cat({m, i}, 0).cpu());
  }
  CHECK(close(got[1], got[0], 0, 0) == "");
  CHECK(close(got[0], cat({rm, rsqrt(rv + 1e-5)}, 0).cpu(), 1e-6, 1e-7) == "");
}

TEST_CASE("fused batch_norm_relu writes only the wanted pieces' gradients, as the separate path",
          "[cuda][norm][bn_relu]") {
  PathGuard guard;
  manual_seed(24);
  Backend& be = backend_for(kGpu);
  for (bool training : {true, false}) {
    INFO((training ? "training" : "eval"));
    V xs{randn({3, 2, 4, 5}).to(kGpu), randn({3, 3, 5, 4}).to(kGpu).permute({0, 1, 3, 2}),
         randn({3, 1, 4, 5}).to(kGpu)};
    Tensor w = (rand({6}) + 0.5).to(kGpu), b = (rand({6}) - 0.5).to(kGpu), gy = randn({3, 6, 4, 5}).to(kGpu);
    std::vector<V> results;
    for (cuda::BnReluPath p : {cuda::BnReluPath::separate, cuda::BnReluPath::fused}) {
      cuda::set_bn_relu_path(p);
      Tensor rm = zeros({6}, {.device = kGpu}), rv = ones({6}, {.device = kGpu});
      Tensor y = empty({3, 6, 4, 5}, {.device = kGpu}), m = empty({6}, {.device = kGpu}),
             i = empty({6}, {.device = kGpu});
      be.batch_norm_relu_forward(y, m, i, xs, w, b, rm, rv, training, 0.1, 1e-5);
      // the middle piece's gradient not wanted; the last one's written through a strided view
      Tensor last = empty({3, 1, 5, 4}, {.device = kGpu}).permute({0, 1, 3, 2});
      V gxs{empty({3, 2, 4, 5}, {.device = kGpu}), Tensor(), last};
      Tensor gw = empty({6}, {.device = kGpu}), gb = empty({6}, {.device = kGpu});
      be.batch_norm_relu_backward(gxs, gw, gb, gy, xs, y, w, m, i, training);
      results.push_back({y.cpu(), rm.cpu(), rv.cpu(), m.cpu(), i.cpu(), gxs[0].cpu(), gxs[2].cpu(), gw.cpu(),
                         gb.cpu()});
    }
    for (size_t k = 0; k < results[0].size(); ++k) {
      INFO("result " << k);
      CHECK(close(results[1][k], results[0][k], 1e-5, 1e-5) == "");
    }
  }
}

TEST_CASE("fused batch_norm_relu serves bf16 staged in f32 and the channel-blocked form", "[cuda][norm][bn_relu]") {
  PathGuard guard;
  manual_seed(25);
  Tensor a = randn({4, 8, 6, 6}), b2 = randn({4, 8, 6, 6});
  for (cuda::BnReluPath p : {cuda::BnReluPath::separate, cuda::BnReluPath::fused}) {
    cuda::set_bn_relu_path(p);
    const uint64_t before = cuda::bn_relu_fused_calls();
    Tensor got = batch_norm_relu({a.to(kGpu).to(DType::bf16), b2.to(kGpu).to(DType::bf16)}, {}, {}, {}, {}, true);
    Tensor want = batch_norm_relu({a.to(DType::bf16).to(DType::f32), b2.to(DType::bf16).to(DType::f32)}, {}, {}, {},
                                  {}, true);
    CHECK(close(got.cpu().to(DType::f32), want.to(DType::bf16).to(DType::f32), 0.02, 0.02) == "");
    Tensor z = batch_norm_relu_blocked({a.to(kGpu), b2.to(kGpu)}, {}, {}, {}, {}, true, 0.1, 1e-5, 16);
    Tensor zc = batch_norm_relu_blocked({a, b2}, {}, {}, {}, {}, true, 0.1, 1e-5, 16);
    CHECK(close(z.cpu(), zc, 1e-4, 1e-5) == "");
    CHECK(cuda::bn_relu_fused_calls() == before + (p == cuda::BnReluPath::fused ? 2 : 0));
  }
}

namespace {
// A dense block in small: two convolutions whose outputs and the input are normalised
// together (BatchNorm2d::forward_relu over three pieces), SGD with momentum, `steps`
// steps after an eager warm-up, eagerly or by replays of a captured step.
std::vector<Tensor> train_dense(bool graph, int steps) {
  manual_seed(31);
  nn::Conv2d c1(4, 6, 3, {.padding = 1}), c2(10, 6, 3, {.padding = 1});
  nn::BatchNorm2d n1(10), n2(16);
  nn::Linear fc(16, 5);
  std::vector<nn::Module*> mods{&c1, &c2, &n1, &n2, &fc};
  std::vector<Tensor> params;
  for (nn::Module* m : mods) {
    m->to(kGpu);
    for (const Tensor& p : m->parameters()) params.push_back(p);
  }
  optim::SGD opt(params, {.lr = 0.05, .momentum = 0.9});
  manual_seed(32);
  Tensor x = zeros({8, 4, 8, 8}, {.device = kGpu}), y = zeros({8}, {.dtype = DType::i64, .device = kGpu});
  std::vector<Tensor> xs, ys;
  for (int i = 0; i <= steps; ++i) {
    xs.push_back(randn({8, 4, 8, 8}).cuda());
    ys.push_back(randint(0, 5, {8}).cuda());
  }
  auto step = [&] {
    opt.zero_grad();
    Tensor a = c1(x);
    Tensor b = c2(n1.forward_relu({x, a}));
    Tensor f = n2.forward_relu({x, a, b});
    cross_entropy(fc(adaptive_avg_pool2d(f, 1, 1).flatten(1)), y).backward();
    opt.step();
  };
  x.copy_(xs[0]);
  y.copy_(ys[0]);
  step();
  cuda::Graph g;
  if (graph) g.capture(step);
  for (int i = 1; i <= steps; ++i) {
    x.copy_(xs[size_t(i)]);
    y.copy_(ys[size_t(i)]);
    if (graph) g.replay();
    else step();
  }
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.detach().cpu());
  for (nn::BatchNorm2d* n : {&n1, &n2}) out.push_back(n->running_var.cpu());
  return out;
}
}  // namespace

TEST_CASE("a dense block trains the same by both paths, and the fused path captures and replays",
          "[cuda][norm][bn_relu][graph]") {
  PathGuard guard;
  cuda::set_bn_relu_path(cuda::BnReluPath::separate);
  std::vector<Tensor> sep = train_dense(false, 4);
  cuda::set_bn_relu_path(cuda::BnReluPath::fused);
  const uint64_t before = cuda::bn_relu_fused_calls();
  std::vector<Tensor> fus = train_dense(false, 4);
  CHECK(cuda::bn_relu_fused_calls() == before + 5 * 4);  // 5 steps, 2 norms, forward and backward
  std::vector<Tensor> rep = train_dense(true, 4);
  REQUIRE(sep.size() == fus.size());
  REQUIRE(rep.size() == fus.size());
  for (size_t i = 0; i < sep.size(); ++i) {
    INFO("parameter " << i);
    CHECK(close(fus[i], sep[i], 1e-4, 1e-5) == "");
    // cuDNN's backward algorithms may sum in another order run to run: rounding only
    CHECK(close(rep[i], fus[i], 1e-4, 1e-5) == "");
  }
}
