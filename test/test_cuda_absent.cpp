// Without a usable GPU (no CUDA backend in the build, no driver, or no device), asking
// for a CUDA tensor is a clear reel::Error, never a crash, and cuda/cuda.h answers
// every query. Runs in every build; on a machine with a GPU, reel_cuda_tests covers it.
#include <catch2/catch.hpp>
#include <reel/cuda/cuda.h>
#include <reel/reel.h>

#include <functional>
#include <string>

using namespace reel;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("asking for a CUDA device without one throws a clear Error", "[cuda]") {
  if (cuda::is_available()) {
    SUCCEED("a CUDA device is present: reel_cuda_tests checks the GPU");
    return;
  }
  CHECK(cuda::device_count() == 0);
  CHECK_THAT(cuda::unavailable_reason(), Catch::Contains("no CUDA device"));

  std::string e = error_of([] { zeros({2}, {.device = Device::cuda()}); });
  CHECK_THAT(e, Catch::Contains("cuda:0") && Catch::Contains("no CUDA device"));
  CHECK_THAT(error_of([] { randn({3, 4}, {.device = Device::cuda(1)}); }), Catch::Contains("cuda:1"));
  CHECK_THAT(error_of([] { ones({2, 2}).cuda(); }), Catch::Contains("no CUDA device"));
  CHECK_THAT(error_of([] { tensor({1, 2, 3}, {.device = Device::cuda()}); }), Catch::Contains("no CUDA device"));
  CHECK_THAT(error_of([] { cuda::memory_stats(0); }), Catch::Contains("cuda:0"));
  CHECK_THAT(error_of([] { cuda::synchronize(0); }), Catch::Contains("cuda:0"));

  // the CPU carries on as before
  CHECK((ones({2}) + 1.0).to_vector<float>() == std::vector<float>{2, 2});
}

TEST_CASE("pinned_empty gives an ordinary host tensor when no GPU can pin for it", "[cuda]") {
  if (cuda::is_available()) return;
  Tensor p = cuda::pinned_empty({4, 3}, DType::f64);
  CHECK(p.device().is_cpu());
  CHECK(p.shape() == Dims{4, 3});
  CHECK(p.dtype() == DType::f64);
  CHECK_FALSE(cuda::is_pinned(p));
  p.fill_(2.0);
  CHECK(p.sum().item<double>() == 24.0);
  CHECK(cuda::host_sync_count() == 0);
  bool tf32 = cuda::allow_tf32();
  cuda::set_allow_tf32(!tf32);
  CHECK(cuda::allow_tf32() == !tf32);
  cuda::set_allow_tf32(tf32);
}

TEST_CASE("cuda::Graph without a GPU throws an Error saying why, and never runs the step", "[cuda][graph]") {
  if (cuda::is_available()) return;
  cuda::Graph g;  // constructing one is fine in every build
  CHECK_FALSE(g.captured());
  CHECK(g.replays() == 0);
  bool ran = false;
  std::string e = error_of([&] { g.capture([&] { ran = true; }); });
  CHECK_THAT(e, Catch::Contains("cuda::Graph::capture") && Catch::Contains("cuda:0") &&
                    Catch::Contains("no CUDA device"));
  CHECK_FALSE(ran);
  CHECK_THAT(error_of([&] { g.replay(); }), Catch::Contains("cuda::Graph::replay"));
  CHECK_THAT(error_of([] { cuda::Graph(1).capture([] {}); }), Catch::Contains("cuda:1"));
  g.reset();
}

TEST_CASE("cuda::EventTimer without a GPU throws an Error saying why", "[cuda][bench]") {
  if (cuda::is_available()) return;
  std::string e = error_of([] { cuda::EventTimer t; });
  CHECK_THAT(e, Catch::Contains("cuda::EventTimer") && Catch::Contains("cuda:0"));
  CHECK_THAT(error_of([] { cuda::EventTimer t(1); }), Catch::Contains("cuda:1"));
}
