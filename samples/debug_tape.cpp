// debug_tape: records a small model's forward pass, prints the tape as a table and
// renders the recorded graph with Graphviz.
//
//   ./debug_tape [out_dir]     writes out_dir/debug_tape.dot and, when Graphviz's `dot`
//                              is installed, out_dir/debug_tape.png
#include <reel/reel.h>

#include <cstdlib>
#include <iostream>
#include <string>

using reel::Tensor;

// A layer as a user writes one: y = tanh(x * w + b), per feature. Opening a SiteScope
// makes every op inside report the caller's line, as nn::Module::operator() does.
Tensor scale_tanh(const Tensor& x, const Tensor& w, const Tensor& b, reel::Site site = {}) {
  reel::SiteScope at_caller(site);
  return reel::tanh(x * w + b);
}

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : ".";
  reel::manual_seed(0);
  Tensor x = reel::randn({4, 3});
  Tensor target = reel::tensor({1, 0, 1, 1});
  Tensor w = reel::randn({3}).requires_grad_();
  Tensor b = reel::zeros({3}).requires_grad_();

  Tensor h = scale_tanh(x, w, b);  // mul, add, tanh: all reported at this line
  Tensor logits = reel::sum(h, {1});
  Tensor loss = reel::binary_cross_entropy_with_logits(logits, target);

  std::cout << "loss " << loss.item<float>() << "\n\nthe tape:\n";
  reel::debug::print_tape(std::cout);

  std::string dot = dir + "/debug_tape.dot", png = dir + "/debug_tape.png";
  reel::debug::write_dot(dot);
  std::cout << "\nwrote " << dot << "\n";
  if (std::system("command -v dot >/dev/null 2>&1") == 0) {
    std::string cmd = "dot -Tpng '" + dot + "' -o '" + png + "'";
    if (std::system(cmd.c_str()) != 0) {
      std::cerr << "dot failed: " << cmd << "\n";
      return 1;
    }
    std::cout << "rendered " << png << "\n";
  } else {
    std::cout << "Graphviz not found: render it elsewhere with  dot -Tpng " << dot << " -o " << png << "\n";
  }
  loss.backward();
  std::cout << "w.grad() " << w.grad() << "\n";
  return 0;
}
