// Autocast's parameter copies kept between steps (TensorImpl::autocast_copy): the
// optimizer rounds them in its own pass, and every way a parameter can change (a step,
// no_grad edits, load_state_dict, Module::to, a graph still holding the old copy) gives
// the next forward the parameter's current values, bit for bit as a fresh cast would.
#include <reel/cpu/isa.h>

#include <cstring>

#include "gradcheck.h"

using namespace reel;

namespace {

// the same bits (f16/bf16 tensors of one shape)
bool same_bits(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape()) || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.numel()) * x.element_size()) == 0;
}

// bf16 where the CPU computes bf16 products natively, else f16 (bf16 autocast then runs
// the products in f32 and keeps no copies)
DType low() { return cpu::bf16_products_native() ? DType::bf16 : DType::f16; }

// what a forward under `dt` reads for p
Tensor copy_of(const Tensor& p, DType dt = low()) {
  AutocastGuard amp({.dtype = dt});
  return autocast_lower(p);
}

nn::Sequential small_model() {
  return nn::Sequential{nn::Linear(40, 32), nn::ReLU(), nn::Linear(32, 7)};
}

}  // namespace

TEST_CASE("the optimizer refreshes a read copy in place, as cast() rounds", "[autocast][autocast_copies]") {
  for (DType dt : {low(), DType::f16}) {
    INFO(dtype_name(dt));
    manual_seed(5);
    Tensor w = randn({300, 70}).requires_grad_();  // not a multiple of the 4096-element block
    optim::Adam opt({w}, {.lr = 1e-2});
    Tensor before = copy_of(w, dt).clone();
    void* where = copy_of(w, dt).data_ptr();
    w.set_grad(randn({300, 70}));
    opt.step();
    Tensor now = copy_of(w, dt);
    CHECK(now.data_ptr() == where);  // the kept copy, written by the step
    CHECK(same_bits(now, w.detach().to(dt)));
    CHECK_FALSE(same_bits(now, before));
  }
}

TEST_CASE("training under autocast with kept copies matches converting every step", "[autocast][autocast_copies]") {
  for (bool adamw : {false, true}) {
    INFO((adamw ? "AdamW" : "Adam"));
    auto train = [&](bool keep) {
      manual_seed(11);
      nn::Sequential m = small_model();
      Tensor x = randn({16, 40}), y = randint(0, 7, {16}, {.dtype = DType::i64});
      std::unique_ptr<optim::Optimizer> opt;
      if (adamw) opt = std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 1e-2});
      else opt = std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 1e-2});
      std::vector<float> losses;
      for (int s = 0; s < 4; ++s) {
        if (!keep)
          for (const Tensor& p : m.parameters()) autocast_copy_drop(p);
        Tensor loss;
        {
          AutocastGuard amp({.dtype = low()});
          loss = cross_entropy(m(x), y);
        }
        losses.push_back(loss.item<float>());
        loss.backward();
        opt->step();
        opt->zero_grad();
      }
      return losses;
    };
    std::vector<float> kept = train(true), fresh = train(false);
    CHECK(kept == fresh);
    CHECK(kept.back() < kept.front());
  }
}

TEST_CASE("no_grad edits and load_state_dict reach the next autocast forward", "[autocast][autocast_copies]") {
  manual_seed(2);
  nn::Linear lin(3, 2);
  Tensor w = lin.weight;
  Tensor x = ones({1, 3});
  (void)copy_of(w);
  {
    NoGradGuard no_grad;
    w.fill_(0.5);
  }
  CHECK(same_bits(copy_of(w), full({2, 3}, 0.5).to(low())));
  {
    NoGradGuard no_grad;
    w.mul_(4.0);
  }
  CHECK(same_bits(copy_of(w), full({2, 3}, 2.0).to(low())));
  auto state = lin.state_dict();
  for (auto& [name, t] : state)
    if (name == "weight") t = full({2, 3}, -3.0);
  lin.load_state_dict(state);
  CHECK(same_bits(copy_of(w), full({2, 3}, -3.0).to(low())));
  AutocastGuard amp({.dtype = low()});
  Tensor out = lin(x);
  CHECK(out.to(DType::f32).to_vector<float>() ==
        (full({1, 2}, -9.0) + lin.bias.detach()).to(low()).to(DType::f32).to_vector<float>());
}

TEST_CASE("Module::to drops the copy of the storage it replaces", "[autocast][autocast_copies]") {
  nn::Linear lin(4, 3);
  Tensor w = lin.weight;
  Tensor first = copy_of(w);
  lin.to(DType::f64);
  {
    NoGradGuard no_grad;
    w.fill_(1.25);
  }
  lin.to(DType::f32);  // new storage, whose version may equal the old one's
  CHECK(same_bits(copy_of(w), full({3, 4}, 1.25).to(low())));
  CHECK_FALSE(same_bits(copy_of(w), first));
}

TEST_CASE("a graph holding the old copy keeps it; the step writes a new one", "[autocast][autocast_copies]") {
  manual_seed(4);
  Tensor w = randn({5, 6}).requires_grad_();
  Tensor x = randn({2, 6});
  optim::SGD opt({w}, {.lr = 0.5});
  Tensor held;
  Tensor out;
  {
    AutocastGuard amp({.dtype = low()});
    held = autocast_lower(w);
    out = linear(x, w);  // its graph saves the copy for x's gradient... and w's product
  }
  Tensor old_bits = held.clone();
  w.set_grad(ones({5, 6}));
  opt.step();
  CHECK(same_bits(held, old_bits));  // what the pending graph computed with
  Tensor now = copy_of(w);
  CHECK(now.data_ptr() != held.data_ptr());
  CHECK(same_bits(now, w.detach().to(low())));
  out.sum().backward();  // the graph's own version check still passes
  CHECK(w.grad().defined());
}

TEST_CASE("a copy no forward read since the last step is dropped, not refreshed", "[autocast][autocast_copies]") {
  Tensor w = full({4, 4}, 1.0).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.25});
  Tensor first = copy_of(w);
  void* where = first.data_ptr();
  first = Tensor();
  w.set_grad(ones({4, 4}));
  opt.step();  // read since made: refreshed in place
  CHECK(copy_of(w).data_ptr() == where);
  opt.step();  // read once more above: refreshed again
  opt.step();  // not read since: dropped; the forward converts afresh
  CHECK(same_bits(copy_of(w), full({4, 4}, 0.25).to(low())));
}

TEST_CASE("optim_step_rounded refuses a rounded copy that does not fit its parameter", "[autocast][autocast_copies]") {
  Tensor p = zeros({8}), g = ones({8}), m = zeros({8}), v = zeros({8});
  OptimStep s;
  s.kind = OptimStep::adam;
  s.lr = 0.1;
  s.bias_correction1 = s.bias_correction2 = 1;
  Backend& be = backend_for(kCPU);
  std::vector<Tensor> ps{p}, gs{g}, ms{m}, vs{v};
  CHECK_THROWS_WITH(be.optim_step_rounded(s, ps, gs, ms, vs, {}, {zeros({7}, {.dtype = DType::bf16})}),
                    Catch::Contains("optim_step_rounded") && Catch::Contains("[8]") && Catch::Contains("[7]"));
  CHECK_THROWS_WITH(be.optim_step_rounded(s, ps, gs, ms, vs, {}, {zeros({8}, {.dtype = DType::f32})}),
                    Catch::Contains("f16/bf16"));
  Tensor r = zeros({8}, {.dtype = DType::bf16});
  REQUIRE(be.optim_step_rounded(s, ps, gs, ms, vs, {}, {r}));
  CHECK(same_bits(r, p.to(DType::bf16)));
  CHECK(p.to_vector<float>()[0] < -0.09f);
}
