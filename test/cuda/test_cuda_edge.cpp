// The cases a careful read of cuda/ found risky (issue 22), for the first GPU run: argmax
// over rows of -inf, matmuls with M, N or K = 1 under every epilogue, a bias that is a
// misaligned view, every op on empty tensors, tensors of more than 2^31 elements, f64
// convolutions, TF32 on and off, a CNN training step captured and replayed, peer copies
// refused during a capture, cuDNN's int descriptors, and REEL_CUDA_SYNC=1.
#include <cstdlib>
#include <memory>

#include "compare.h"

using namespace reel;
using cuda_test::kGpu;
using cuda_test::leaf;
using V = std::vector<Tensor>;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// f on the CPU and on the GPU: the same values and gradients, or an Error on both.
std::string same_or_both_throw(const cuda_test::Fn& f, const V& inputs) {
  std::string cpu_error = error_of([&] {
    V in;
    for (const Tensor& t : inputs) in.push_back(t.detach().clone());
    (void)f(in);
  });
  if (cpu_error.empty()) {
    std::string d;
    std::string gpu_error = error_of([&] { d = cuda_test::same_on_gpu(f, inputs); });
    return gpu_error.empty() ? d : "the GPU threw where the CPU did not: " + gpu_error;
  }
  V in;
  for (const Tensor& t : inputs) in.push_back(t.detach().to(kGpu));
  std::string gpu_error = error_of([&] { (void)f(in).cpu(); });
  return gpu_error.empty() ? "the CPU threw (" + cpu_error + "), the GPU did not" : "";
}

struct Tf32 {  // TF32 on for one scope
  Tf32() { cuda::set_allow_tf32(true); }
  ~Tf32() { cuda::set_allow_tf32(false); }
};

double max_rel_error(const Tensor& got, const Tensor& want) {
  Tensor d = abs(got.to(DType::f64) - want.to(DType::f64));
  return amax(d).item<double>() / std::max(1e-30, amax(abs(want.to(DType::f64))).item<double>());
}
}  // namespace

TEST_CASE("argmax and argmin of rows of -inf and +inf give index 0 on every path", "[cuda][reduce][edge]") {
  const double inf = INFINITY;
  // [4, 5] over dim 1: the row kernel; over dim 0: the column kernel; [2, 2^20] over dim 1:
  // groups split across blocks and combined; a whole contiguous tensor: CUB.
  for (Dims shape : {Dims{4, 5}, Dims{2, 1 << 20}, Dims{3, 70000}}) {
    INFO(shape.str());
    for (int64_t dim : {int64_t(0), int64_t(1)}) {
      Tensor lo = full(shape, -inf, {.device = kGpu}), hi = full(shape, inf, {.device = kGpu});
      Tensor amx = argmax(lo, dim), amn = argmin(hi, dim);
      CHECK(amax(amx).item<int64_t>() == 0);
      CHECK(amin(amx).item<int64_t>() == 0);
      CHECK(amax(amn).item<int64_t>() == 0);
      // the indices are usable: the next index op reads in bounds
      CHECK(index_select(lo, dim, amx.reshape({-1}).slice(0, 0, 1)).sum().item<double>() == -inf);
    }
    Tensor flat = full({shape[0] * shape[1]}, -inf, {.device = kGpu});
    CHECK(argmax(flat, 0).item<int64_t>() == 0);
    CHECK(argmin(full({shape[0] * shape[1]}, inf, {.dtype = DType::f64, .device = kGpu}), 0).item<int64_t>() == 0);
  }
  // lowest() itself and integers at their extremes
  Tensor t = tensor({-INFINITY, -3.4028234663852886e38, -INFINITY});
  CHECK(argmax(t.cuda(), 0).item<int64_t>() == 1);
  Tensor u = zeros({3, 40}, {.dtype = DType::u8, .device = kGpu});
  CHECK(amax(argmax(u, 1)).item<int64_t>() == 0);
  CHECK_SAME_ON_GPU([](const V& v) { return argmax(v[0] * 0.0 - INFINITY, 1).to(DType::f32); }, {leaf({5, 9})}, 0, 0);
}

TEST_CASE("matmul and linear with M, N or K = 1 under every epilogue", "[cuda][matmul][edge]") {
  manual_seed(21);
  for (DType dt : {DType::f32, DType::f64}) {
    for (Dims mnk : {Dims{1, 7, 5}, Dims{6, 1, 5}, Dims{6, 7, 1}, Dims{1, 1, 1}, Dims{1, 1, 9}, Dims{9, 1, 1},
                     Dims{1, 33, 1}}) {
      INFO(dtype_name(dt) << " M, N, K = " << mnk.str());
      int64_t M = mnk[0], N = mnk[1], K = mnk[2];
      Tensor x = leaf({M, K}, -2, 2, dt), w = leaf({N, K}, -2, 2, dt), b = leaf({N}, -2, 2, dt);
      double tol = dt == DType::f64 ? 1e-12 : 1e-5;
      CHECK_SAME_ON_GPU([](const V& v) { return matmul(v[0], v[1].t()); }, {x, w}, tol, tol);
      CHECK_SAME_ON_GPU([](const V& v) { return linear(v[0], v[1]); }, {x, w}, tol, tol);
      CHECK_SAME_ON_GPU([](const V& v) { return linear(v[0], v[1], v[2]); }, {x, w, b}, tol, tol);
      CHECK_SAME_ON_GPU([](const V& v) { return linear_relu(v[0], v[1], v[2]); }, {x, w, b}, tol, tol);
      CHECK_SAME_ON_GPU([](const V& v) { return linear_relu(v[0], v[1]); }, {x, w}, tol, tol);
      CHECK_SAME_ON_GPU([](const V& v) { return matmul(v[0].unsqueeze(0), v[1].t()); }, {x, w}, tol, tol);
    }
  }
}

TEST_CASE("a bias that is a misaligned view runs unfused and right", "[cuda][matmul][edge]") {
  manual_seed(22);
  Tensor x = leaf({16, 24}), w = leaf({32, 24}), big = leaf({40});
  for (int64_t off : {1, 2, 3, 4}) {  // 4, 8, 12 and 16 bytes into the buffer
    INFO("bias offset " << off);
    CHECK_SAME_ON_GPU([off](const V& v) { return linear(v[0], v[1], v[2].slice(0, off, off + 32)); }, {x, w, big},
                      1e-5, 1e-5);
    CHECK_SAME_ON_GPU([off](const V& v) { return linear_relu(v[0], v[1], v[2].slice(0, off, off + 32)); },
                      {x, w, big}, 1e-5, 1e-5);
  }
  // the same shapes with an aligned bias after a misaligned one: both plans stay right
  CHECK_SAME_ON_GPU([](const V& v) { return linear_relu(v[0], v[1], v[2].slice(0, 0, 32)); }, {x, w, big}, 1e-5,
                    1e-5);
}

TEST_CASE("every op on empty tensors does what the CPU does", "[cuda][edge][empty]") {
  manual_seed(23);
  Tensor e03 = leaf({0, 3}), e30 = leaf({3, 0}), v3 = leaf({3}), e4d = leaf({0, 3, 8, 8}), w4 = leaf({4, 3, 3, 3});
  Tensor b4 = leaf({4}), w40 = leaf({4, 0}), m53 = leaf({5, 3});
  Tensor no_idx = zeros({0}, {.dtype = DType::i64}), one_idx = zeros({1}, {.dtype = DType::i64});
  struct Case {
    const char* name;
    cuda_test::Fn f;
    V in;
  };
  std::vector<Case> cases = {
      {"exp", [](const V& v) { return exp(v[0]); }, {e03}},
      {"relu", [](const V& v) { return relu(v[0]); }, {e03}},
      {"add broadcast", [](const V& v) { return v[0] + v[1]; }, {e03, v3}},
      {"mul", [](const V& v) { return v[0] * v[0]; }, {e30}},
      {"where", [](const V& v) { return where(v[0] > 0.0, v[0], v[0] * 2.0); }, {e03}},
      {"sum", [](const V& v) { return v[0].sum(); }, {e03}},
      {"sum dim 0", [](const V& v) { return v[0].sum({0}); }, {e03}},
      {"mean", [](const V& v) { return v[0].mean(); }, {e03}},
      {"amax dim 1", [](const V& v) { return amax(v[0], {1}); }, {e03}},
      {"amax dim 0", [](const V& v) { return amax(v[0], {0}); }, {e03}},
      {"prod dim 0", [](const V& v) { return prod(v[0], {0}); }, {e03}},
      {"argmax dim 1", [](const V& v) { return argmax(v[0], 1).to(DType::f32); }, {e03}},
      {"argmax dim 0", [](const V& v) { return argmax(v[0], 0).to(DType::f32); }, {e03}},
      {"matmul M = 0", [](const V& v) { return matmul(v[0], v[1].t()); }, {e03, m53}},
      {"matmul K = 0", [](const V& v) { return matmul(v[0], v[1].t()); }, {e30, w40}},
      {"linear K = 0 with bias", [](const V& v) { return linear(v[0], v[1], v[2]); }, {e30, w40, b4}},
      {"linear_relu K = 0", [](const V& v) { return linear_relu(v[0], v[1], v[2]); }, {e30, w40, b4}},
      {"conv2d N = 0", [](const V& v) { return conv2d(v[0], v[1], v[2], {.padding = 1}); }, {e4d, w4, b4}},
      {"conv2d_relu N = 0", [](const V& v) { return conv2d_relu(v[0], v[1], v[2]); }, {e4d, w4, b4}},
      {"max_pool2d", [](const V& v) { return max_pool2d(v[0]); }, {e4d}},
      {"avg_pool2d", [](const V& v) { return avg_pool2d(v[0]); }, {e4d}},
      {"layer_norm", [](const V& v) { return layer_norm(v[0], {3}); }, {e03}},
      {"batch_norm", [](const V& v) {
         return batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
       }, {e03}},
      {"softmax", [](const V& v) { return softmax(v[0], 1); }, {e03}},
      {"log_softmax dim 0", [](const V& v) { return log_softmax(v[0], 0); }, {e03}},
      {"cross_entropy", [&](const V& v) { return cross_entropy(v[0], no_idx.to(v[0].device())); }, {e03}},
      {"cross_entropy none", [&](const V& v) {
         return cross_entropy(v[0], no_idx.to(v[0].device()), {.reduction = Reduction::none});
       }, {e03}},
      {"index_select no index", [&](const V& v) { return index_select(v[0], 0, no_idx.to(v[0].device())); }, {m53}},
      {"index_select of empty", [&](const V& v) { return index_select(v[0], 1, one_idx.to(v[0].device())); }, {e03}},
      {"gather", [&](const V& v) { return gather(v[0], 0, zeros({0, 3}, {.dtype = DType::i64, .device = v[0].device()})); },
       {m53}},
      {"embedding", [&](const V& v) { return embedding(v[0], no_idx.to(v[0].device())); }, {m53}},
      {"cat", [](const V& v) { return cat({v[0], v[1]}, 0); }, {e03, m53}},
      {"to f64", [](const V& v) { return v[0].to(DType::f64); }, {e03}},
      {"transpose contiguous", [](const V& v) { return v[0].t().contiguous(); }, {e30}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    CHECK(same_or_both_throw(c.f, c.in) == "");
  }
  Tensor r = rand({0}, {.device = kGpu}), n = randn({0, 4}, {.device = kGpu});
  CHECK(r.numel() == 0);
  CHECK(n.cpu().numel() == 0);
  // an optimizer step over an empty parameter next to a real one
  Tensor p0 = zeros({0}, {.device = kGpu}).requires_grad_(), p1 = ones({3}, {.device = kGpu}).requires_grad_();
  optim::SGD opt({p0, p1}, {.lr = 0.5, .momentum = 0.9});
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    (p0.sum() + p1.sum()).backward();
    opt.step();
  }
  for (float v : p1.cpu().to_vector<float>()) CHECK(v == Approx(1.0 - 0.5 - 0.5 * 1.9));  // momentum 0.9
}

TEST_CASE("tensors of more than 2^31 elements copy, sum and index_select", "[cuda][edge][large]") {
  // u8 keeps it at 2 GiB a tensor; the values are known, so no CPU reference is needed.
  const int64_t rows = (int64_t(1) << 21) + 1, cols = 1024, n = rows * cols;  // 2^31 + 1024 elements
  Tensor x = full({rows, cols}, 1.0, {.dtype = DType::u8, .device = kGpu});
  x.slice(0, rows - 1, rows).fill_(7.0);  // the last row: past 2^31
  const int64_t total = (rows - 1) * cols + 7 * cols;
  CHECK(x.sum().item<int64_t>() == total);                 // whole tensor
  CHECK(x.sum({0}).sum().item<int64_t>() == total);        // columns over 2^21 + 1 rows
  CHECK(x.sum({1}).sum().item<int64_t>() == total);        // 2^21 + 1 rows
  CHECK(x.reshape({-1}).slice(0, n - 1, n).to(DType::i64).item<int64_t>() == 7);
  Tensor c = x.clone();                                    // contiguous copy, in pieces
  CHECK(c.sum().item<int64_t>() == total);
  Tensor t = x.t().contiguous();                           // strided copy [cols, rows]
  CHECK(t.slice(0, cols - 1, cols).slice(1, rows - 1, rows).to(DType::i64).item<int64_t>() == 7);
  CHECK(t.sum().item<int64_t>() == total);
  c = Tensor();
  t = Tensor();
  Tensor last = index_select(x, 0, tensor({double(rows - 1), 0.0, double(rows - 2)}, {.dtype = DType::i64}).cuda());
  CHECK(last.sum().item<int64_t>() == 9 * cols);
  Tensor all = index_select(x, 0, arange(rows, {.dtype = DType::i64, .device = kGpu}));  // output > 2^31
  // Failed on the H200 (11-28, 11-29) as a sum of 2^31 + 1024: the row sums say which rows, and
  // the reads of x after it whether the output or the input is wrong.
  {
    auto row_sum = [&](const Tensor& t, int64_t r) { return t.slice(0, r, r + 1).to(DType::i64).sum().item<int64_t>(); };
    INFO("rows " << rows - 3 << ".." << rows - 1 << " of the output sum to " << row_sum(all, rows - 3) << ", "
                 << row_sum(all, rows - 2) << ", " << row_sum(all, rows - 1) << "; of x to " << row_sum(x, rows - 3)
                 << ", " << row_sum(x, rows - 2) << ", " << row_sum(x, rows - 1) << "; the first 2^21 - 1 rows of the "
                 << "output to " << all.slice(0, 0, rows - 2).sum().item<int64_t>());
    CHECK(row_sum(all, rows - 1) == 7 * cols);
    CHECK(all.sum().item<int64_t>() == total);
  }
  all = Tensor();
  Tensor two = index_select(x, 1, tensor({1023.0, 0.0}, {.dtype = DType::i64}).cuda());  // reads across all of x
  CHECK(two.sum().item<int64_t>() == 2 * (rows - 1) + 14);
  Tensor f = x.reshape({-1}).slice(0, n - 4, n).to(DType::f32);
  CHECK(f.cpu().to_vector<float>() == std::vector<float>(4, 7.0f));
}

TEST_CASE("f64 convolutions match the CPU", "[cuda][conv][edge]") {
  manual_seed(24);
  auto d = [](const Dims& s) { return leaf(s, -1, 1, DType::f64); };
  CHECK_SAME_ON_GPU([](const V& v) { return conv2d(v[0], v[1], v[2], {.padding = 1}); },
                    {d({2, 3, 9, 11}), d({4, 3, 3, 3}), d({4})}, 1e-10, 1e-12);
  CHECK_SAME_ON_GPU([](const V& v) { return conv2d_relu(v[0], v[1], v[2], {.stride = 2}); },
                    {d({2, 3, 9, 11}), d({4, 3, 3, 3}), d({4})}, 1e-10, 1e-12);
  CHECK_SAME_ON_GPU([](const V& v) { return conv2d(v[0], v[1], Tensor(), {.groups = 2}); },
                    {d({2, 4, 6, 6}), d({6, 2, 3, 3})}, 1e-10, 1e-12);
  CHECK_SAME_ON_GPU([](const V& v) { return conv2d(v[0], v[1], v[2]); }, {d({3, 2, 5, 5}), d({4, 2, 5, 5}), d({4})},
                    1e-10, 1e-12);  // the whole input: a GEMM
}

TEST_CASE("fused conv + bias: identity and relu each fall back on their own", "[cuda][conv][edge]") {
  manual_seed(25);
  // the same shapes with and without relu, in both orders: a refused identity must leave relu fused and right
  for (bool relu_first : {true, false}) {
    for (Dims xs : {Dims{4, 8, 16, 16}, Dims{2, 3, 32, 32}}) {
      INFO(xs.str() << (relu_first ? " relu first" : " identity first"));
      Tensor x = leaf(xs), w = leaf({16, xs[1], 3, 3}, -0.5, 0.5), b = leaf({16});
      for (int k = 0; k < 2; ++k) {
        bool relu = (k == 0) == relu_first;
        CHECK_SAME_ON_GPU(
            [relu](const V& v) {
              return relu ? conv2d_relu(v[0], v[1], v[2], {.padding = 1}) : conv2d(v[0], v[1], v[2], {.padding = 1});
            },
            {x, w, b}, 1e-4, 1e-4);
      }
    }
  }
}

TEST_CASE("TF32 off matches the CPU to float32 rounding; on, it is used and close", "[cuda][matmul][conv][tf32]") {
  manual_seed(26);
  Tensor a = randn({256, 512}), b = randn({512, 256});
  Tensor want = matmul(a.to(DType::f64), b.to(DType::f64));
  double off = max_rel_error(matmul(a.cuda(), b.cuda()).cpu(), want);
  double on = 0;
  {
    Tf32 tf32;
    on = max_rel_error(matmul(a.cuda(), b.cuda()).cpu(), want);
  }
  INFO("relative error: TF32 off " << off << ", on " << on);
  CHECK(off < 1e-5);
  CHECK(on < 2e-2);
  CHECK(on > 4 * off);  // TF32 keeps 10 mantissa bits: clearly coarser, so it did run
  CHECK(max_rel_error(matmul(a.cuda(), b.cuda()).cpu(), want) == off);  // off again: the plan of before
  Tensor x = randn({8, 32, 16, 16}), w = randn({32, 32, 3, 3});
  Tensor cwant = conv2d(x.to(DType::f64), w.to(DType::f64), Tensor(), {.padding = 1});
  double coff = max_rel_error(conv2d(x.cuda(), w.cuda(), Tensor(), {.padding = 1}).cpu(), cwant);
  double con = 0;
  {
    Tf32 tf32;
    con = max_rel_error(conv2d(x.cuda(), w.cuda(), Tensor(), {.padding = 1}).cpu(), cwant);
  }
  INFO("conv relative error: TF32 off " << coff << ", on " << con);
  CHECK(coff < 1e-5);
  CHECK(con < 2e-2);
}

namespace {
// A small CNN (conv, batch norm, relu, max pool, linear, cross-entropy, SGD with momentum)
// trained on `steps` batches after one eager warm-up step: eagerly, or by replays of a capture.
std::vector<Tensor> train_cnn(bool graph, int steps, float& last_loss) {
  manual_seed(27);
  nn::Sequential net{nn::Conv2d(1, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
                     nn::Conv2d(8, 16, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                     nn::Linear(16 * 4 * 4, 10)};
  net.to(kGpu);
  optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
  manual_seed(28);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i <= steps; ++i) {
    xs.push_back(randn({16, 1, 16, 16}).cuda());
    ys.push_back(randint(0, 10, {16}).cuda());
  }
  Tensor x = zeros({16, 1, 16, 16}, {.device = kGpu}), y = zeros({16}, {.dtype = DType::i64, .device = kGpu});
  Tensor loss;
  auto step = [&] {
    opt.zero_grad();
    loss = cross_entropy(net(x), y);
    loss.backward();
    opt.step();
  };
  x.copy_(xs[0]);
  y.copy_(ys[0]);
  step();
  cuda::Graph g;
  if (graph) g.capture(step);
  uint64_t syncs = cuda::host_sync_count();
  for (int i = 1; i <= steps; ++i) {
    x.copy_(xs[size_t(i)]);
    y.copy_(ys[size_t(i)]);
    if (graph) g.replay();
    else step();
  }
  CHECK(cuda::host_sync_count() == syncs);
  last_loss = loss.item<float>();
  std::vector<Tensor> out;
  for (const Tensor& p : net.parameters()) out.push_back(p.detach().cpu());
  return out;
}
}  // namespace

TEST_CASE("a CNN training step captured and replayed equals eager steps", "[cuda][graph][conv][edge]") {
  float eager_loss = 0, graph_loss = 0;
  std::vector<Tensor> eager = train_cnn(false, 6, eager_loss), replayed = train_cnn(true, 6, graph_loss);
  REQUIRE(eager.size() == replayed.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    INFO("parameter " << i);
    // cuDNN's backward algorithms may sum in a different order run to run: rounding only
    CHECK(cuda_test::close(replayed[i], eager[i], 1e-4, 1e-5) == "");
  }
  CHECK(std::isfinite(eager_loss));
  CHECK(std::abs(eager_loss - graph_loss) <= 1e-4f * std::max(1.0f, std::abs(eager_loss)));
}

TEST_CASE("a peer copy during a capture is refused like other host-side work", "[cuda][graph][multi][errors]") {
  if (cuda::device_count() < 2) {
    WARN("one GPU: the peer copy inside a capture is not exercised");
    return;
  }
  Tensor a = ones({64}, {.device = kGpu});
  Tensor b = (a * 2.0).to(Device::cuda(1));  // eager: works
  CHECK(b.sum().item<float>() == 128.0f);
  cuda::Graph g;
  std::string e = error_of([&] { g.capture([&] { b = (a * 3.0).to(Device::cuda(1)); }); });
  CHECK_THAT(e, Catch::Contains("copy from cuda:0 to cuda:1") && Catch::Contains("cuda::Graph::capture"));
  CHECK((a * 2.0).sum().item<float>() == 128.0f);  // the device works on
}

TEST_CASE("a convolution too large for cuDNN's int descriptors is refused, saying how to split",
          "[cuda][conv][edge][large]") {
  // [524288, 64, 8, 8] = 2^31 elements, 8 GiB of f32: never filled, refused before cuDNN sees it
  Tensor x = empty({524288, 64, 8, 8}, {.device = kGpu}), w = zeros({8, 64, 3, 3}, {.device = kGpu});
  CHECK_THAT(error_of([&] { (void)conv2d(x, w, Tensor(), {.padding = 1}); }),
             Catch::Contains("conv2d") && Catch::Contains("at most 524287 images"));
  x = Tensor();
  CHECK(conv2d(ones({2, 64, 8, 8}, {.device = kGpu}), w).sum().item<float>() == 0.0f);
}

// Run by ctest as reel_cuda_tests_sync (REEL_CUDA_SYNC=1); hidden from the normal run.
TEST_CASE("REEL_CUDA_SYNC=1 names the op whose kernel found a bad index", "[.][sync_mode]") {
  const char* env = std::getenv("REEL_CUDA_SYNC");
  if (!env || std::string(env) != "1") {
    WARN("REEL_CUDA_SYNC is not 1: nothing to check");
    return;
  }
  Tensor t = randn({5, 3}).cuda();
  // the error comes from index_select itself, not from a later synchronisation
  CHECK_THAT(error_of([&] { (void)index_select(t, 0, tensor({0, 7}, {.dtype = DType::i64}).cuda()); }),
             Catch::Contains("index_select: index 7 is out of range") && Catch::Contains("host synchronisation: index_select"));
  CHECK(t.sum().item<float>() == Approx(t.cpu().sum().item<float>()));
  // a capture runs nothing and is not synchronised: it still works in this mode
  Tensor w = randn({8, 8}).cuda().requires_grad_();
  Tensor x = randn({4, 8}).cuda();
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  auto step = [&] {
    opt.zero_grad();
    relu(matmul(x, w)).sum().backward();
    opt.step();
  };
  step();
  cuda::Graph g;
  g.capture(step);
  g.replay();
  CHECK(std::isfinite(w.sum().item<float>()));
}

TEST_CASE("uniform_ and normal_ over a range give the CPU's floats (no FMA contraction on either side)",
          "[cuda][random][edge]") {
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    Tensor uc = empty({4099}, {.dtype = dt}), ug = empty({4099}, {.dtype = dt, .device = kGpu});
    Tensor nc = empty({4099}, {.dtype = dt}), ng = empty({4099}, {.dtype = dt, .device = kGpu});
    manual_seed(29);
    uniform_(uc, 0.1, 1.8);
    normal_(nc, 0.3, 1.7);
    manual_seed(29);
    uniform_(ug, 0.1, 1.8);
    normal_(ng, 0.3, 1.7);
    CHECK(cuda_test::close(ug.cpu(), uc, 0, 0) == "");       // bit for bit
    CHECK(cuda_test::close(ng.cpu(), nc, 1e-5, 1e-6) == "");  // logf/cosf may differ in the last bits
  }
}

TEST_CASE("uniform_ and normal_ on strided and empty GPU tensors give the CPU's numbers", "[cuda][random][edge]") {
  for (bool normal : {false, true}) {
    INFO((normal ? "normal_" : "uniform_"));
    auto fill = [&](Tensor t) {
      if (normal) normal_(t, 0.5, 2.0);
      else uniform_(t, -1.0, 3.0);
    };
    Tensor c = zeros({6, 9}), g = zeros({6, 9}, {.device = kGpu});
    manual_seed(43);
    fill(c.t());
    fill(c.slice(1, 0, 9, 3));
    manual_seed(43);
    fill(g.t());
    fill(g.slice(1, 0, 9, 3));
    CHECK(cuda_test::close(g.cpu(), c, 1e-5, 1e-6) == "");  // normal_: logf/cosf may differ in the last bits
    manual_seed(43);
    fill(empty({0, 4}, {.device = kGpu}));
    fill(empty({4, 0}, {.device = kGpu}).t());
    Tensor after_empty = empty({8}, {.device = kGpu});
    fill(after_empty);
    manual_seed(43);
    Tensor fresh = empty({8}, {.device = kGpu});
    fill(fresh);
    CHECK(cuda_test::close(after_empty.cpu(), fresh.cpu(), 0, 0) == "");  // the empty fills drew nothing
  }
}
