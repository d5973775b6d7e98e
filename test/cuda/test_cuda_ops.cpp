// Every op on the GPU gives the CPU's result, for contiguous, non-contiguous
// (transposed, sliced, permuted) and broadcast inputs, and so do its gradients.
#include "compare.h"

using namespace reel;
using cuda_test::leaf;
using V = std::vector<Tensor>;

TEST_CASE("unary ops match the CPU", "[cuda][elementwise]") {
  manual_seed(1);
  Tensor x = leaf({33, 65}), pos = leaf({33, 65}, 0.1, 3.0);
  std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
      {"neg", [](const Tensor& t) { return neg(t); }},
      {"abs", [](const Tensor& t) { return abs(t); }},
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"leaky_relu", [](const Tensor& t) { return leaky_relu(t, 0.1); }},
      {"gelu", [](const Tensor& t) { return gelu(t); }},
      {"gelu tanh", [](const Tensor& t) { return gelu(t, "tanh"); }},
      {"erf", [](const Tensor& t) { return erf(t); }},
      {"silu", [](const Tensor& t) { return silu(t); }},
      {"mish", [](const Tensor& t) { return mish(t); }},
      {"hardswish", [](const Tensor& t) { return hardswish(t * 4.0); }},
      {"softplus", [](const Tensor& t) { return softplus(t, 2.0, 1.0); }},
      {"elu", [](const Tensor& t) { return elu(t, 0.7); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"square", [](const Tensor& t) { return square(t); }},
      {"sin", [](const Tensor& t) { return sin(t); }},
      {"cos", [](const Tensor& t) { return cos(t); }},
      {"pow 2", [](const Tensor& t) { return pow(t, 2.0); }},
      {"pow 3", [](const Tensor& t) { return pow(t, 3.0); }},
      {"clamp", [](const Tensor& t) { return clamp(t, -0.5, 0.7); }},
      {"scalars", [](const Tensor& t) { return (t * 3.0 + 1.0) / 2.0 - 0.25; }},
      {"sign", [](const Tensor& t) { return sign(t); }},
  };
  for (auto& [name, op] : ops) {
    INFO(name);
    CHECK_SAME_ON_GPU([&](const V& v) { return op(v[0]); }, {x});
    CHECK_SAME_ON_GPU([&](const V& v) { return op(v[0].t()); }, {x});                     // transposed
    CHECK_SAME_ON_GPU([&](const V& v) { return op(v[0].slice(1, 1, 60, 3)); }, {x});      // strided slice
  }
  for (auto& [name, op] : std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>>{
           {"log", [](const Tensor& t) { return log(t); }},
           {"sqrt", [](const Tensor& t) { return sqrt(t); }},
           {"rsqrt", [](const Tensor& t) { return rsqrt(t); }},
           {"reciprocal", [](const Tensor& t) { return reciprocal(t); }},
           {"pow 2.5", [](const Tensor& t) { return pow(t, 2.5); }},
       }) {
    INFO(name);
    CHECK_SAME_ON_GPU([&](const V& v) { return op(v[0]).t(); }, {pos});
  }
  // comparisons give bool tensors on both devices
  CHECK_SAME_ON_GPU([](const V& v) { return (v[0] > 0.25).to(DType::f32); }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return logical_not(v[0] <= 0.0).to(DType::f32); }, {x});
  // f64 and a large tensor (the vectorised path and its tail)
  CHECK_SAME_ON_GPU([](const V& v) { return tanh(v[0]) * 2.0; }, {leaf({1 << 20 | 3}, -2, 2, DType::f64)}, 1e-12,
                    1e-12);
}

TEST_CASE("binary ops match the CPU, broadcast and strided", "[cuda][elementwise]") {
  manual_seed(2);
  Tensor a = leaf({4, 5, 6}), b = leaf({4, 5, 6}, 0.5, 2.0), row = leaf({6}, 0.5, 2.0), col = leaf({4, 1, 1}, 0.5, 2.0);
  std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
      {"add", [](const Tensor& x, const Tensor& y) { return x + y; }},
      {"sub", [](const Tensor& x, const Tensor& y) { return x - y; }},
      {"mul", [](const Tensor& x, const Tensor& y) { return x * y; }},
      {"div", [](const Tensor& x, const Tensor& y) { return x / y; }},
      {"maximum", [](const Tensor& x, const Tensor& y) { return maximum(x, y); }},
      {"minimum", [](const Tensor& x, const Tensor& y) { return minimum(x, y); }},
      {"pow", [](const Tensor& x, const Tensor& y) { return pow(abs(x) + 0.1, y); }},
  };
  for (auto& [name, op] : ops) {
    INFO(name);
    CHECK_SAME_ON_GPU([&](const V& v) { return op(v[0], v[1]); }, {a, b});
    CHECK_SAME_ON_GPU([&](const V& v) { return op(v[0], v[1]); }, {a, row});                         // bias-like
    CHECK_SAME_ON_GPU([&](const V& v) { return op(v[0], v[1]); }, {a, col});                         // per-batch
    CHECK_SAME_ON_GPU([&](const V& v) { return op(v[0].permute({2, 0, 1}), v[1].permute({2, 0, 1})); }, {a, b});
    CHECK_SAME_ON_GPU([&](const V& v) { return op(v[0].transpose(0, 2), v[1]); }, {a, leaf({6, 5, 1}, 0.5, 2)});
  }
  CHECK_SAME_ON_GPU([](const V& v) { return where(v[0] > v[1], v[0], v[1] * 2.0); }, {a, b});
  CHECK_SAME_ON_GPU([](const V& v) { return (v[0] == v[0].transpose(0, 2).transpose(0, 2)).to(DType::f32) + (v[0] < v[1]).to(DType::f32); },
                    {a, b});
  CHECK_SAME_ON_GPU([](const V& v) { return logical_and(v[0] > 0.0, v[1] > 1.0).to(DType::f32); }, {a, b});
  // integers
  Tensor i = leaf({7, 9}, -50, 50, DType::i64), j = leaf({9}, 1, 20, DType::i32);
  CHECK_SAME_ON_GPU([](const V& v) { return (v[0] * v[1].to(DType::i64) + v[0]).to(DType::f64); }, {i, j});
}

TEST_CASE("copies and dtype conversions match the CPU", "[cuda][copy]") {
  manual_seed(3);
  Tensor x = leaf({17, 31}, -300, 300, DType::f32, false);
  for (DType dt : {DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean}) {
    INFO(dtype_name(dt));
    // float to u8 of a negative value is undefined behaviour in C++: only 0..255 for u8
    Tensor src = dt == DType::u8 ? abs(x) * (255.0 / 300.0) : x;
    CHECK_SAME_ON_GPU([dt](const V& v) { return v[0].to(dt).to(DType::f32); }, {src}, 0, 0);
    CHECK_SAME_ON_GPU([dt](const V& v) { return v[0].t().to(dt).to(DType::f64); }, {src}, 0, 0);
    // converted on the host, then moved: the GPU reads the CPU's bits
    Tensor h = src.to(dt);
    CHECK(cuda_test::close(h.cuda().cpu().to(DType::f64), h.to(DType::f64), 0, 0) == "");
    CHECK(cuda_test::close(h.t().cuda().cpu().to(DType::f64), h.t().to(DType::f64), 0, 0) == "");
  }
  // strided destinations, both directions
  Tensor g = zeros({8, 10}, {.device = cuda_test::kGpu});
  g.slice(1, 2, 10, 2).copy_(x.slice(0, 0, 8).slice(1, 0, 4));
  Tensor c = zeros({8, 10});
  c.slice(1, 2, 10, 2).copy_(x.slice(0, 0, 8).slice(1, 0, 4));
  CHECK(cuda_test::close(g.cpu(), c, 0, 0) == "");
  Tensor host = zeros({10, 8});
  host.t().copy_(g);
  CHECK(cuda_test::close(host, c.t().contiguous(), 0, 0) == "");
  CHECK_SAME_ON_GPU([](const V& v) { return v[0].permute({1, 0}).contiguous().reshape({-1}); }, {x}, 0, 0);
  CHECK_SAME_ON_GPU([](const V& v) { return cat({v[0], v[0].slice(0, 0, 5) * 2.0}, 0); }, {leaf({6, 7})});
}

TEST_CASE("random fills give the CPU's numbers for the same seed", "[cuda][random]") {
  manual_seed(42);
  Tensor uc = rand({1001}), nc = randn({999}, {.dtype = DType::f64});
  Tensor uc2 = rand({5, 7});
  manual_seed(42);
  Tensor ug = rand({1001}, {.device = cuda_test::kGpu}), ng = randn({999}, {.dtype = DType::f64, .device = cuda_test::kGpu});
  Tensor ug2 = rand({5, 7}, {.device = cuda_test::kGpu});
  CHECK(cuda_test::close(ug.cpu(), uc, 0, 0) == "");  // uniforms: bit for bit
  CHECK(cuda_test::close(ug2.cpu(), uc2, 0, 0) == "");
  CHECK(cuda_test::close(ng.cpu(), nc, 1e-5, 1e-6) == "");  // normals: logf/cosf may differ in the last bits
}

TEST_CASE("a Generator's CUDA stream gives its CPU stream's numbers, and its state restores both", "[cuda][random]") {
  Generator cpu(17), gpu(17);
  Tensor uc = rand({1001}, cpu), dc = dropout(ones({300}), 0.3, cpu);
  Tensor ug = rand({1001}, gpu, {.device = cuda_test::kGpu});
  Tensor dg = dropout(ones({300}, {.device = cuda_test::kGpu}), 0.3, gpu);
  CHECK(cuda_test::close(ug.cpu(), uc, 0, 0) == "");
  CHECK(cuda_test::close(dg.cpu(), dc, 0, 0) == "");
  // each device type has its own offset: the GPU draws left the CPU stream at 0
  CHECK(gpu.get_state() == GeneratorState{.seed = 17, .cpu_offset = 0, .cuda_offset = cpu.get_state().cpu_offset});
  GeneratorState s = gpu.get_state();
  Tensor next = randn({77}, gpu, {.device = cuda_test::kGpu});
  gpu.set_state(s);
  CHECK(cuda_test::close(randn({77}, gpu, {.device = cuda_test::kGpu}).cpu(), next.cpu(), 0, 0) == "");
}

TEST_CASE("reductions match the CPU", "[cuda][reduce]") {
  manual_seed(4);
  Tensor x = leaf({6, 7, 8}), big = leaf({3, 1 << 18}), nchw = leaf({8, 16, 32, 32});
  CHECK_SAME_ON_GPU([](const V& v) { return v[0].sum(); }, {x}, 1e-4, 1e-4);
  CHECK_SAME_ON_GPU([](const V& v) { return v[0].mean(); }, {big}, 1e-4, 1e-5);
  CHECK_SAME_ON_GPU([](const V& v) { return v[0].sum({1}, true); }, {big}, 1e-4, 1e-5);
  for (Dims d : {Dims{0}, Dims{1}, Dims{2}, Dims{0, 2}, Dims{1, 2}, Dims{-1}}) {
    INFO(d.str());
    CHECK_SAME_ON_GPU([d](const V& v) { return v[0].sum(d); }, {x}, 1e-4, 1e-5);
    CHECK_SAME_ON_GPU([d](const V& v) { return v[0].mean(d, true); }, {x}, 1e-4, 1e-5);
    CHECK_SAME_ON_GPU([d](const V& v) { return amax(v[0].transpose(0, 2), d); }, {x});
    CHECK_SAME_ON_GPU([d](const V& v) { return amin(v[0], d); }, {x});
    CHECK_SAME_ON_GPU([d](const V& v) { return prod(v[0] * 0.5 + 1.0, d); }, {x}, 1e-4, 1e-5);
    CHECK_SAME_ON_GPU([d](const V& v) { return var(v[0].permute({1, 2, 0}), d); }, {x}, 1e-4, 1e-6);
  }
  CHECK_SAME_ON_GPU([](const V& v) { return argmax(v[0], 1).to(DType::f32) + argmin(v[0], -1, true).to(DType::f32).sum(); },
                    {x}, 0, 0);
  // the bias gradient of a convolution: [N, C, H, W] -> [C] (kept dim strided, groups split across blocks)
  CHECK_SAME_ON_GPU([](const V& v) { return v[0].sum({0, 2, 3}); }, {nchw}, 1e-4, 1e-4);
  // batch sum of [N, C] (the kept dim is the contiguous one)
  CHECK_SAME_ON_GPU([](const V& v) { return v[0].t().sum({1}); }, {big}, 1e-4, 1e-4);
  // integer sums accumulate in i64
  Tensor ints = leaf({50, 40}, -100, 100, DType::i32);
  CHECK_SAME_ON_GPU([](const V& v) { return v[0].sum({0}).to(DType::f64); }, {ints}, 0, 0);
  // ties and NaN: the first index wins, NaN wins
  Tensor t = tensor({{1, 3, 3, 0}, {2, NAN, 5, NAN}});
  CHECK_SAME_ON_GPU([](const V& v) { return argmax(v[0], 1).to(DType::f32); }, {t}, 0, 0);
  CHECK_SAME_ON_GPU([](const V& v) { return amax(v[0], {1}); }, {t}, 0, 0);
}

TEST_CASE("matmul, bmm and linear match the CPU (TF32 off)", "[cuda][matmul]") {
  manual_seed(5);
  Tensor a = leaf({37, 53}), b = leaf({53, 29}), bias = leaf({29}), w = leaf({29, 53});
  CHECK_SAME_ON_GPU([](const V& v) { return matmul(v[0], v[1]); }, {a, b}, 1e-4, 1e-4);
  CHECK_SAME_ON_GPU([](const V& v) { return matmul(v[1].t(), v[0].t()); }, {a, b}, 1e-4, 1e-4);  // both transposed
  CHECK_SAME_ON_GPU([](const V& v) { return linear(v[0], v[1], v[2]); }, {a, w, bias}, 1e-4, 1e-4);
  CHECK_SAME_ON_GPU([](const V& v) { return linear_relu(v[0], v[1], v[2]); }, {a, w, bias}, 1e-4, 1e-4);
  CHECK_SAME_ON_GPU([](const V& v) { return linear(v[0].slice(1, 0, 53), v[1]); }, {a, w}, 1e-4, 1e-4);
  // both strides > 1: copied to contiguous first
  CHECK_SAME_ON_GPU([](const V& v) { return matmul(v[0].slice(0, 0, 37, 2).slice(1, 0, 53, 2), v[1].slice(0, 0, 53, 2)); },
                    {a, b}, 1e-4, 1e-4);
  Tensor x3 = leaf({5, 12, 16}), y3 = leaf({5, 16, 9}), shared = leaf({16, 9});
  CHECK_SAME_ON_GPU([](const V& v) { return bmm(v[0], v[1]); }, {x3, y3}, 1e-4, 1e-4);
  CHECK_SAME_ON_GPU([](const V& v) { return matmul(v[0], v[1]); }, {x3, shared}, 1e-4, 1e-4);  // broadcast weight
  CHECK_SAME_ON_GPU([](const V& v) { return matmul(v[0].transpose(1, 2), v[1].transpose(1, 2)); },
                    {leaf({3, 8, 6}), leaf({3, 5, 8})}, 1e-4, 1e-4);
  CHECK_SAME_ON_GPU([](const V& v) { return linear(v[0], v[1], v[2]); },
                    {leaf({9, 11}, -1, 1, DType::f64), leaf({4, 11}, -1, 1, DType::f64), leaf({4}, -1, 1, DType::f64)},
                    1e-12, 1e-12);
}

TEST_CASE("convolutions match the CPU", "[cuda][conv]") {
  manual_seed(6);
  struct Case {
    Dims x, w;
    Conv2dOptions opt;
    bool bias, relu;
  };
  std::vector<Case> cases = {
      {{2, 3, 9, 11}, {4, 3, 3, 3}, {}, true, false},
      {{2, 3, 9, 11}, {4, 3, 3, 3}, {.stride = {2, 1}, .padding = {1, 2}}, true, true},
      {{2, 4, 10, 10}, {6, 2, 3, 3}, {.padding = {1, 1}, .dilation = {2, 2}, .groups = 2}, false, false},
      {{3, 1, 28, 28}, {8, 1, 28, 28}, {}, true, true},   // covers the whole input: a GEMM
      {{3, 8, 1, 1}, {5, 8, 1, 1}, {}, true, false},      // 1x1 on 1x1: a GEMM
      {{2, 5, 6, 6}, {7, 5, 1, 1}, {}, true, false},      // 1x1 on 6x6: cuDNN
  };
  for (const Case& c : cases) {
    INFO(c.x.str() << " * " << c.w.str());
    Tensor x = leaf(c.x), w = leaf(c.w, -0.5, 0.5), b = leaf({c.w[0]});
    CHECK_SAME_ON_GPU(
        [&c](const V& v) {
          Tensor bias = c.bias ? v[2] : Tensor();
          return c.relu ? conv2d_relu(v[0], v[1], bias, c.opt) : conv2d(v[0], v[1], bias, c.opt);
        },
        {x, w, b}, 1e-4, 1e-3);  // up to 784 products per output
  }
  // a non-contiguous input
  CHECK_SAME_ON_GPU([](const V& v) { return conv2d(v[0].permute({0, 1, 3, 2}), v[1], v[2]); },
                    {leaf({2, 3, 8, 7}), leaf({4, 3, 3, 3}), leaf({4})}, 1e-4, 1e-4);
}

TEST_CASE("pooling matches the CPU", "[cuda][pool]") {
  manual_seed(7);
  Tensor x = leaf({2, 3, 11, 9});
  CHECK_SAME_ON_GPU([](const V& v) { return max_pool2d(v[0]); }, {x}, 1e-6, 1e-7);
  CHECK_SAME_ON_GPU([](const V& v) { return max_pool2d(v[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}); },
                    {x}, 1e-6, 1e-7);
  CHECK_SAME_ON_GPU([](const V& v) { return avg_pool2d(v[0], {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}}); },
                    {x});
  CHECK_SAME_ON_GPU(
      [](const V& v) {
        return avg_pool2d(v[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false});
      },
      {x});
  CHECK_SAME_ON_GPU([](const V& v) { return adaptive_avg_pool2d(v[0], 4, 3); }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return adaptive_avg_pool2d(v[0].transpose(2, 3), 5, 5); }, {x});
}

TEST_CASE("batch norm and layer norm match the CPU", "[cuda][norm]") {
  manual_seed(8);
  for (Dims shape : {Dims{16, 6, 5, 7}, Dims{64, 10}, Dims{8, 4, 9}}) {
    INFO(shape.str());
    int64_t C = shape[1];
    Tensor x = leaf(shape, -3, 5), w = leaf({C}, 0.5, 1.5), b = leaf({C});
    Tensor rm_c = zeros({C}), rv_c = ones({C});
    Tensor rm_g = rm_c.cuda(), rv_g = rv_c.cuda();
    CHECK_SAME_ON_GPU(
        [&](const V& v) {
          bool gpu = v[0].device().is_cuda();
          return batch_norm(v[0], v[1], v[2], gpu ? rm_g : rm_c, gpu ? rv_g : rv_c, true, 0.1, 1e-5);
        },
        {x, w, b}, 1e-4, 1e-5);
    CHECK(cuda_test::close(rm_g.cpu(), rm_c, 1e-5, 1e-6) == "");
    CHECK(cuda_test::close(rv_g.cpu(), rv_c, 1e-5, 1e-6) == "");
    CHECK_SAME_ON_GPU(
        [&](const V& v) {
          bool gpu = v[0].device().is_cuda();
          return batch_norm(v[0], v[1], v[2], gpu ? rm_g : rm_c, gpu ? rv_g : rv_c, false, 0.1, 1e-5);
        },
        {x, w, b}, 1e-4, 1e-5);
  }
  CHECK_SAME_ON_GPU([](const V& v) { return layer_norm(v[0], {10}, v[1], v[2]); },
                    {leaf({7, 3, 10}), leaf({10}), leaf({10})}, 1e-4, 1e-5);
  CHECK_SAME_ON_GPU([](const V& v) { return layer_norm(v[0], {3, 700}); }, {leaf({5, 3, 700}, -1, 3)}, 1e-4, 1e-5);
  CHECK_SAME_ON_GPU([](const V& v) { return layer_norm(v[0].transpose(0, 1), {6}, v[1], v[2]); },
                    {leaf({6, 4, 6}), leaf({6}), leaf({6})}, 1e-4, 1e-5);
}

TEST_CASE("softmax and cross-entropy match the CPU", "[cuda][softmax][loss]") {
  manual_seed(9);
  Tensor x = leaf({9, 13}, -5, 5), wide = leaf({3, 3000}, -5, 5), x3 = leaf({4, 7, 5}, -5, 5);
  CHECK_SAME_ON_GPU([](const V& v) { return softmax(v[0], -1); }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return log_softmax(v[0], 1); }, {x});
  CHECK_SAME_ON_GPU([](const V& v) { return softmax(v[0], 1); }, {wide});
  CHECK_SAME_ON_GPU([](const V& v) { return log_softmax(v[0], 1); }, {x3});  // a middle dim
  CHECK_SAME_ON_GPU([](const V& v) { return softmax(v[0].t(), 0); }, {x});
  Tensor labels = tensor({0, 3, 12, 5, 5, 1, 7, 2, 11}, {.dtype = DType::i64});
  for (double eps : {0.0, 0.1}) {
    INFO("label_smoothing " << eps);
    CHECK_SAME_ON_GPU(
        [&](const V& v) { return cross_entropy(v[0], labels.to(v[0].device()), {.label_smoothing = eps}); }, {x},
        1e-5, 1e-6);
    CHECK_SAME_ON_GPU(
        [&](const V& v) {
          return cross_entropy(v[0], labels.to(v[0].device()), {.reduction = Reduction::none, .ignore_index = 5});
        },
        {x}, 1e-5, 1e-6);
  }
  Tensor many = leaf({4, 20000}, -3, 3);
  Tensor many_labels = tensor({19999, 0, 777, 12345}, {.dtype = DType::i64});
  CHECK_SAME_ON_GPU([&](const V& v) { return cross_entropy(v[0], many_labels.to(v[0].device())); }, {many}, 1e-5,
                    1e-6);
}

TEST_CASE("indexing matches the CPU, repeated indices accumulate", "[cuda][index]") {
  manual_seed(10);
  Tensor table = leaf({11, 6}), idx = tensor({3, 0, 3, 10, 3}, {.dtype = DType::i64});
  CHECK_SAME_ON_GPU([&](const V& v) { return embedding(v[0], idx.to(v[0].device())); }, {table});
  CHECK_SAME_ON_GPU([&](const V& v) { return index_select(v[0], 1, tensor({5, 5, 0}, {.dtype = DType::i64}).to(v[0].device())); },
                    {table});
  CHECK_SAME_ON_GPU([&](const V& v) { return index_select(v[0].t(), 0, tensor({1, 4}, {.dtype = DType::i64}).to(v[0].device())); },
                    {table});
  Tensor gidx = tensor({{0, 5, 5}, {2, 2, 1}}, {.dtype = DType::i64});
  CHECK_SAME_ON_GPU([&](const V& v) { return gather(v[0].slice(0, 0, 2), 1, gidx.to(v[0].device())); }, {table});
  CHECK_SAME_ON_GPU([&](const V& v) { return one_hot(idx.to(v[0].device()), 11) * v[0].sum(); }, {leaf({1})});
}

TEST_CASE("optimizer steps give the CPU's parameters", "[cuda][optim]") {
  manual_seed(11);
  auto run = [](Device dev, int kind) {
    manual_seed(12);
    std::vector<Tensor> ps = {randn({300, 7}).to(dev).detach().requires_grad_(), randn({5000}).to(dev).detach().requires_grad_(),
                              randn({3}, {.dtype = DType::f64}).to(dev).detach().requires_grad_()};
    std::unique_ptr<optim::Optimizer> opt;
    switch (kind) {
      case 0: opt = std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3}); break;
      case 1: opt = std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true}); break;
      case 2: opt = std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-2}); break;
      case 3: opt = std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 1e-2}); break;
      case 4: opt = std::make_unique<optim::Adamax>(ps, optim::AdamaxOptions{}); break;
      case 6:
        opt = std::make_unique<optim::Adagrad>(ps, optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.01, .weight_decay = 1e-2,
                                                                          .initial_accumulator_value = 0.1});
        break;
      default: opt = std::make_unique<optim::RMSprop>(ps, optim::RMSpropOptions{.momentum = 0.5, .centered = true}); break;
    }
    for (int step = 0; step < 3; ++step) {
      opt->zero_grad();
      Tensor loss;
      for (auto& p : ps) {
        Tensor l = (p.to(DType::f32) * p.to(DType::f32)).sum() * 0.5 + p.to(DType::f32).sum();
        loss = loss.defined() ? loss + l : l;
      }
      loss.backward();
      opt->step();
    }
    std::vector<Tensor> out;
    for (auto& p : ps) out.push_back(p.detach().cpu());
    return out;
  };
  for (int kind = 0; kind < 7; ++kind) {
    INFO("optimizer " << kind);
    auto c = run(kCPU, kind), g = run(cuda_test::kGpu, kind);
    // Bit for bit: cpu/optim.cpp and cuda/optim.cu do the same IEEE operations, fused only
    // where both write fma (the first GPU run found SGD 1e-6 apart: GCC had contracted the
    // CPU's multiply-adds its own way, nvcc none). The gradients are the same bits too
    // (products and sums of the same floats, one rounding each). Subnormals aside: the CPU
    // step flushes them (cpu/optim.cpp), and none occur here.
    for (size_t i = 0; i < c.size(); ++i) CHECK(cuda_test::close(g[i], c[i], 0, 0) == "");
  }
}
