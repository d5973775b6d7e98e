// The two libtorch tutorials that trained worse without a word (issue 41): the ResNet's
// residual block written with `out += residual` and the VAE's reparameterisation written
// with `eps.mul(std).add_(mu)` and `log_var.div(2).exp_()`, as the tutorials write them,
// train exactly like their out-of-place forms: the same parameters, bit for bit, after
// several optimizer steps from the same seed.
#include <catch2/catch.hpp>
#include <reel/reel.h>

using namespace reel;

namespace {

// The tutorial's ResidualBlock: conv-bn-relu-conv-bn, then the skip path (downsampled
// when the shape changes) added, then relu.
struct ResidualBlock : nn::Module {
  ResidualBlock(int64_t in, int64_t out, int64_t stride, bool inplace)
      : conv1(in, out, 3, {.stride = stride, .padding = 1, .bias = false}),
        bn1(out),
        conv2(out, out, 3, {.padding = 1, .bias = false}),
        bn2(out),
        down_conv(in, out, 3, {.stride = stride, .padding = 1, .bias = false}),
        down_bn(out),
        downsample(stride != 1 || in != out),
        inplace(inplace) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    register_module("down_conv", down_conv);
    register_module("down_bn", down_bn);
  }
  Tensor forward(const Tensor& x) override {
    Tensor out = relu(bn1(conv1(x)));
    out = bn2(conv2(out));
    Tensor residual = downsample ? down_bn(down_conv(x)) : x;
    if (inplace) {
      out += residual;
      out.relu_();
      return out;
    }
    return relu(out + residual);
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Conv2d down_conv;
  nn::BatchNorm2d down_bn;
  bool downsample, inplace;
};

struct ResNet : nn::Module {
  explicit ResNet(bool inplace)
      : stem(1, 4, 3, {.padding = 1}), block1(4, 4, 1, inplace), block2(4, 8, 2, inplace), fc(8 * 4 * 4, 10) {
    register_module("stem", stem);
    register_module("block1", block1);
    register_module("block2", block2);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = block2(block1(relu(stem(x))));
    return fc(h.flatten(1));
  }
  nn::Conv2d stem;
  ResidualBlock block1, block2;
  nn::Linear fc;
};

// The tutorial's VAE: encode to (mu, log_var), reparameterise, decode.
struct VAE : nn::Module {
  explicit VAE(bool inplace) : fc1(64, 32), fc2(32, 8), fc3(32, 8), fc4(8, 32), fc5(32, 64), inplace(inplace) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
    register_module("fc4", fc4);
    register_module("fc5", fc5);
  }
  Tensor forward(const Tensor&) override { throw Error("VAE: call run()"); }
  struct Out {
    Tensor reconstruction, mu, log_var;
  };
  Out run(const Tensor& x) {
    Tensor h = relu(fc1(x));
    Tensor mu = fc2(h), log_var = fc3(h);
    Tensor eps = randn(mu.shape());
    Tensor z;
    if (inplace) {
      Tensor std = log_var.div(2.0).exp_();
      z = eps.mul(std).add_(mu);
    } else {
      z = eps * exp(log_var / 2.0) + mu;
    }
    return {sigmoid(fc5(relu(fc4(z)))), mu, log_var};
  }
  nn::Linear fc1, fc2, fc3, fc4, fc5;
  bool inplace;
};

std::vector<std::vector<float>> values(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

}  // namespace

// A fixed thread count: following the machine's load (tensor/parallel.h) would change the
// summation order of the reductions between the two runs, and with it the last bits.
struct FixedThreads {
  bool followed = threads_follow_load();
  FixedThreads() { set_num_threads(2); }
  ~FixedThreads() { set_threads_follow_load(followed); }
};

TEST_CASE("the ResNet tutorial with out += residual trains like out = out + residual", "[inplace][tutorial]") {
  FixedThreads fixed;
  auto train = [](bool inplace) {
    manual_seed(7);
    ResNet net(inplace);
    optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
    std::vector<float> losses;
    for (int step = 0; step < 4; ++step) {
      Tensor x = randn({8, 1, 8, 8});
      Tensor y = randint(0, 10, {8});
      opt.zero_grad();
      Tensor loss = cross_entropy(net(x), y);
      loss.backward();
      opt.step();
      losses.push_back(loss.item<float>());
    }
    return std::make_pair(values(net), losses);
  };
  auto [a, la] = train(true);
  auto [b, lb] = train(false);
  CHECK(la == lb);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
  // the skip path's downsampler learned: its weights moved from their initial values
  manual_seed(7);
  ResNet fresh(true);
  std::vector<std::vector<float>> init = values(fresh);
  auto names = fresh.named_parameters();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].first == "block2.down_conv.weight") CHECK(init[i] != a[i]);
}

TEST_CASE("the VAE tutorial with eps.mul(std).add_(mu) trains like its out-of-place form", "[inplace][tutorial]") {
  FixedThreads fixed;
  auto train = [](bool inplace) {
    manual_seed(11);
    VAE vae(inplace);
    optim::Adam opt(vae.parameters(), {.lr = 1e-2});
    Tensor x = rand({16, 64});
    std::vector<float> losses;
    for (int step = 0; step < 5; ++step) {
      opt.zero_grad();
      auto out = vae.run(x);
      Tensor reconstruction = nn::functional::binary_cross_entropy(out.reconstruction, x, {.reduction = Reduction::sum});
      Tensor kl = -0.5 * sum(1.0 + out.log_var - out.mu.pow(2) - out.log_var.exp());
      Tensor loss = reconstruction + kl;
      loss.backward();
      opt.step();
      losses.push_back(loss.item<float>());
    }
    return std::make_pair(values(vae), losses);
  };
  auto [a, la] = train(true);
  auto [b, lb] = train(false);
  CHECK(la == lb);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
}
