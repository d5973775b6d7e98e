// autograd/hooks.h: a post-accumulate-grad hook runs once per backward, after every
// contribution to the leaf is in .grad() (a leaf used twice included); the end hook runs
// after them; autograd::grad() runs none; removal works.
#include <catch2/catch.hpp>

#include <reel/reel.h>

using namespace reel;

TEST_CASE("backward hooks: once per pass, with the leaf's whole gradient", "[autograd][hooks]") {
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  Tensor b = tensor({3.0}).requires_grad_();
  std::vector<std::string> events;
  std::vector<float> seen_w;
  uint64_t hw = autograd::add_post_accumulate_grad_hook(w, [&](const Tensor& t) {
    events.push_back("w");
    seen_w = t.grad().to_vector<float>();
  });
  uint64_t hb = autograd::add_post_accumulate_grad_hook(b, [&](const Tensor&) { events.push_back("b"); });
  uint64_t he = autograd::add_backward_end_hook([&] { events.push_back("end"); });
  // w is used twice: its hook must wait for both contributions (2 w + w * 3 -> 5 per element)
  Tensor y = (w * 2.0).sum() + (w * b).sum();
  y.backward();
  CHECK(seen_w == std::vector<float>{5.f, 5.f});
  REQUIRE(events.size() == 3);
  CHECK(events.back() == "end");
  CHECK(std::count(events.begin(), events.end(), "w") == 1);
  CHECK(std::count(events.begin(), events.end(), "b") == 1);
  // accumulation over two passes: the hook sees the running sum
  events.clear();
  ((w * 2.0).sum() + (w * b).sum()).backward();
  CHECK(seen_w == std::vector<float>{10.f, 10.f});
  // autograd::grad accumulates nothing and calls no hook
  events.clear();
  (void)autograd::grad({(w * w).sum()}, {w});
  CHECK(events.empty());
  // a pass that does not reach b runs only w's hook
  (w.sum()).backward();
  CHECK(events == std::vector<std::string>{"w", "end"});
  autograd::remove_backward_hook(hw);
  autograd::remove_backward_hook(hb);
  autograd::remove_backward_hook(he);
  autograd::remove_backward_hook(he);  // twice is fine
  events.clear();
  ((w * b).sum()).backward();
  CHECK(events.empty());
}

TEST_CASE("backward hooks: a hook on a leaf root, and the hook fires before backward ends", "[autograd][hooks]") {
  Tensor a = tensor({4.0}).requires_grad_();
  Tensor c = tensor({1.0}).requires_grad_();
  int fired = 0;
  bool c_done_when_a_fired = false;
  auto h1 = autograd::add_post_accumulate_grad_hook(a, [&](const Tensor&) { ++fired; });
  a.sum().backward();  // root one op above the leaf
  CHECK(fired == 1);
  // a leaf whose last use is late in forward finishes early in backward: its hook runs
  // while the rest of backward (c's part) is still to come
  auto h2 = autograd::add_post_accumulate_grad_hook(
      a, [&](const Tensor&) { c_done_when_a_fired = c.grad().defined(); });
  Tensor h = (c * 3.0).exp();
  (h * a).sum().backward();
  CHECK_FALSE(c_done_when_a_fired);
  autograd::remove_backward_hook(h1);
  autograd::remove_backward_hook(h2);
  CHECK_THROWS_WITH(autograd::add_post_accumulate_grad_hook(tensor({1.0}), [](const Tensor&) {}),
                    Catch::Contains("expected a leaf tensor that requires grad"));
}
