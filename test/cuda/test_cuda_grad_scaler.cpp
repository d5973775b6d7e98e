// optim::GradScaler on the GPU: Backend::amp_unscale and amp_update_scale against the CPU's
// (every dtype, inf/-inf/NaN anywhere, more tensors than one launch table holds), no host
// sync in unscale() and update(), and PyTorch 1.13's scripted overflow series
// (test/reference/grad_scaler.inc) on CUDA parameters.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../reference/grad_scaler_ref.h"
#include "compare.h"

using namespace reel;
using reel::cuda_test::close;
using reel::cuda_test::kGpu;

namespace {

// Runs amp_unscale on CPU copies and on GPU copies of `grads`; both results must be equal
// bit for bit (NaN for NaN), and both found_inf flags equal.
std::string same_unscale(const std::vector<Tensor>& grads, double inv_scale) {
  std::vector<Tensor> c, g;
  for (const Tensor& t : grads) {
    c.push_back(t.clone());
    g.push_back(t.to(kGpu));
  }
  Tensor fc = zeros({}), fg = zeros({}, {.device = kGpu});
  backend_for(kCPU).amp_unscale(c, fc, scalar_tensor(inv_scale));
  backend_for(kGpu).amp_unscale(g, fg, scalar_tensor(inv_scale, {.device = kGpu}));
  if (fc.item<float>() != fg.to(kCPU).item<float>())
    return "found_inf: cpu " + std::to_string(fc.item<float>()) + ", gpu " + std::to_string(fg.cpu().item<float>());
  for (size_t i = 0; i < c.size(); ++i)
    if (std::string d = close(g[i].cpu(), c[i], 0, 0); !d.empty()) return "tensor " + std::to_string(i) + ": " + d;
  return "";
}

}  // namespace

TEST_CASE("amp_unscale on the GPU matches the CPU bit for bit, every dtype", "[cuda][grad_scaler]") {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    std::vector<Tensor> grads;
    for (int64_t n : {1, 4095, 4096, 4097, 100000, 3})
      grads.push_back((randn({n}) * 300.0).to(dt));
    for (double inv : {1.0, 1.0 / 3.0, 1.0 / 65536.0, 0.1})
      CHECK(same_unscale(grads, inv) == "");
    for (size_t t = 0; t < grads.size(); ++t) {
      int64_t n = grads[t].numel();
      for (int64_t pos : {int64_t(0), n / 2, n - 1})
        for (double bad : {kInf, -kInf, kNaN}) {
          INFO("tensor " << t << " position " << pos << " value " << bad);
          std::vector<Tensor> poked;
          for (const Tensor& x : grads) poked.push_back(x.clone());
          poked[t].narrow(0, pos, 1).fill_(bad);
          CHECK(same_unscale(poked, 0.25) == "");
        }
    }
  }
}

TEST_CASE("amp_unscale on the GPU: mixed dtypes and more tensors than one launch table", "[cuda][grad_scaler]") {
  std::vector<Tensor> grads;
  for (int i = 0; i < 700; ++i)
    grads.push_back((randn({int64_t(1 + i % 37)}) * 10.0).to(i % 3 == 0 ? DType::f32 : i % 3 == 1 ? DType::bf16 : DType::f64));
  CHECK(same_unscale(grads, 0.125) == "");
  grads[650].narrow(0, 0, 1).fill_(kNaN);  // in the third table
  CHECK(same_unscale(grads, 0.125) == "");
  std::vector<Tensor> empty_too = {zeros({0}), randn({5})};
  CHECK(same_unscale(empty_too, 0.5) == "");
}

TEST_CASE("amp_update_scale on the GPU matches the CPU", "[cuda][grad_scaler]") {
  struct Case {
    double scale;
    int tracker;
    float found;
    double growth, backoff;
    int64_t interval;
  };
  for (const Case& k : {Case{8, 0, 0, 2, 0.5, 2}, Case{8, 1, 0, 2, 0.5, 2}, Case{8, 1, 1, 2, 0.5, 2},
                        Case{3e38, 0, 0, 2, 0.5, 1}, Case{1, 0, 1, 1.5, 0.3, 1}, Case{7, 5, 0, 1.01, 0.5, 2000}}) {
    Tensor sc = scalar_tensor(k.scale), tc = scalar_tensor(k.tracker, {.dtype = DType::i32}), fc = scalar_tensor(k.found);
    Tensor sg = sc.to(kGpu), tg = tc.to(kGpu), fg = fc.to(kGpu);
    backend_for(kCPU).amp_update_scale(sc, tc, fc, k.growth, k.backoff, k.interval);
    backend_for(kGpu).amp_update_scale(sg, tg, fg, k.growth, k.backoff, k.interval);
    CHECK(sg.cpu().item<float>() == sc.item<float>());
    CHECK(tg.cpu().item<int32_t>() == tc.item<int32_t>());
  }
}

TEST_CASE("GradScaler on CUDA parameters follows PyTorch 1.13's series, syncing only in step", "[cuda][grad_scaler]") {
  auto make = [](const std::vector<double>& v, const Dims& shape) { return from_vector<double>(v, shape).to(DType::f32); };
  Tensor w = make(kRefW0, {kRefOut, kRefIn}).to(kGpu).requires_grad_();
  Tensor b = make(kRefB0, {kRefOut}).to(kGpu).requires_grad_();
  Tensor x = make(kRefX, {kRefN, kRefIn}).to(kGpu), y = make(kRefY, {kRefN, kRefOut}).to(kGpu);
  optim::SGD opt({w, b}, {.lr = kRefLr, .momentum = kRefMomentum});
  optim::GradScaler scaler({.init_scale = kRefInitScale, .growth_factor = kRefGrowth, .backoff_factor = kRefBackoff,
                            .growth_interval = kRefInterval});
  for (const RefStep& r : kRefSteps) {
    INFO("step " << r.step);
    opt.zero_grad();
    Tensor loss = mse_loss(linear(x, w, b), y);
    Tensor scaled = scaler.scale(loss);
    CHECK(scaled.device() == kGpu);
    scaled.backward();
    if (r.inject.param >= 0) {
      Tensor g = (r.inject.param == 0 ? w : b).grad();
      g.view({-1}).narrow(0, r.inject.index, 1).fill_(r.inject.value);
    }
    uint64_t syncs = cuda::host_sync_count();
    if (r.unscale) scaler.unscale(opt);
    CHECK(cuda::host_sync_count() == syncs);  // unscale never waits
    CHECK(scaler.step(opt) == r.stepped);
    syncs = cuda::host_sync_count();
    if (r.new_scale != 0) scaler.update(r.new_scale);
    else scaler.update();
    CHECK(cuda::host_sync_count() == syncs);  // nor does update
    CHECK(scaler.scale_tensor().device() == kGpu);
    CHECK(scaler.get_scale() == r.scale_after);
    CHECK(scaler.growth_tracker() == r.tracker);
    std::vector<double> wv = w.cpu().to_vector<double>(), bv = b.cpu().to_vector<double>();
    for (size_t i = 0; i < wv.size(); ++i) CHECK(wv[i] == Approx(r.weight[i]).margin(2e-6).epsilon(2e-6));
    for (size_t i = 0; i < bv.size(); ++i) CHECK(bv[i] == Approx(r.bias[i]).margin(2e-6).epsilon(2e-6));
  }
}
