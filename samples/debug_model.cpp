// The worked example of docs/debugging.md: a model with submodules whose loss turns NaN.
// Its argument switches one debug tool on; each names the line inside forward() and the
// module path. ./debug_model [anomaly|shape|tape|step|profile|hooks]
#include <reel/reel.h>

#include <iostream>
#include <string>
using namespace reel;

struct Features : nn::Module {  // x [N, 16] -> [N, 32]
  nn::Linear fc{16, 32};
  nn::LayerNorm norm{{32}};
  Features() {
    register_module("fc", fc);
    register_module("norm", norm);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = norm(fc(x));
    return sqrt(h) + h;  // a "gated" activation, wrong for h < 0
  }
};

struct Classifier : nn::Module {  // x [N, 16] -> scores [N, 4]
  Features feat;
  nn::Linear head{32, 4};
  Classifier() {
    register_module("feat", feat);
    register_module("head", head);
  }
  Tensor forward(const Tensor& x) override {
    reel::debug::Range r("classifier");
    return head(feat(x));
  }
};

int main(int argc, char** argv) {
  std::string tool = argc > 1 ? argv[1] : "";
  manual_seed(0);
  Classifier model;
  Tensor x = randn({8, tool == "shape" ? 15 : 16});
  Tensor labels = randint(0, 4, {8});
  std::unique_ptr<debug::AnomalyMode> anomaly;
  if (tool == "anomaly") anomaly = std::make_unique<debug::AnomalyMode>();
  std::unique_ptr<debug::StepMode> step;
  if (tool == "step") step = std::make_unique<debug::StepMode>(debug::StepOptions{.nested = false});
  std::unique_ptr<debug::Profiler> prof;
  if (tool == "profile") prof = std::make_unique<debug::Profiler>();
  nn::RemovableHandle hook;
  if (tool == "hooks")
    hook = model.feat.norm.register_forward_hook([](nn::Module& m, const Tensor&, const Tensor& out) {
      std::cout << m.type_name() << " output: " << (out < 0.0).sum().item<int64_t>() << " of " << out.numel()
                << " values < 0\n";
    });
  try {
    Tensor loss = cross_entropy(model(x), labels);
    if (tool == "tape") debug::print_tape(std::cout);
    if (tool == "tape") debug::write_dot("tape.dot");
    loss.backward();
    std::cout << "loss " << loss.item<float>() << "\n";
  } catch (const Error& e) {
    std::cout << e.what() << "\n";
  }
  hook.remove();
  if (prof) {
    prof->stop();
    std::cout << prof->summary(8) << "\n" << prof->module_summary(14);
    prof->write_chrome_trace("trace.json");
  }
}
