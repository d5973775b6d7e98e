// Exports the benchmark and sample models (and one model with every other exportable
// op) to ONNX from a batch of 3, runs reel on a batch of 5 (another size: the batch
// dimension must stay symbolic), and writes each model's input and reel's output as
// raw little-endian arrays plus manifest.json for check_onnx.py, which runs the .onnx
// files in onnxruntime. Also checks that what cannot be exported is refused by name.
// Usage: export_models OUT_DIR
#include <reel/onnx/export.h>
#include <reel/reel.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "../../samples/fashion_mnist.h"  // the samples' models (mlp, cnn)

using namespace reel;

namespace {

// bench/w1_mlp.cpp and bench/w3_cnn.cpp
nn::Sequential w1_mlp() {
  return nn::Sequential{nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 64), nn::ReLU(),
                        nn::Linear(64, 10)};
}
nn::Sequential w3_cnn() {
  return nn::Sequential{nn::Conv2d(1, 32, 3), nn::ReLU(),        nn::Conv2d(32, 64, 3),  nn::ReLU(),
                        nn::MaxPool2d(2),     nn::Dropout(0.25), nn::Flatten(),          nn::Linear(9216, 128),
                        nn::ReLU(),           nn::Dropout(0.5),  nn::Linear(128, 10)};
}

// The exportable ops the models above do not use.
struct Mixed : nn::Module {
  nn::Conv2d conv{3, 8, 3, {.stride = 2, .padding = 1}};
  nn::BatchNorm2d bn{8};
  nn::AvgPool2d avg{3, {.stride = 1, .padding = 1, .count_include_pad = false}};
  nn::AdaptiveAvgPool2d adapt{{2, 2}};
  nn::LayerNorm norm{{8}};
  nn::Linear fc{8, 8}, head{8, 6};
  Mixed() {
    register_module("conv", conv), register_module("bn", bn), register_module("avg", avg);
    register_module("adapt", adapt), register_module("norm", norm), register_module("fc", fc);
    register_module("head", head);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = gelu(bn(conv(x)));                                 // [N, 8, 4, 4]
    h = adapt(avg(h));                                            // [N, 8, 4, 4] -> [N, 8, 2, 2]
    Tensor t = h.reshape({h.size(0), 8, 4}).transpose(1, 2);      // [N, 4, 8]
    t = norm(t);
    Tensor u = fc(t);                                             // 3-D linear: MatMul + Add
    Tensor a = softmax(matmul(u, t.transpose(1, 2)), -1);          // [N, 4, 4]
    Tensor v = tanh(matmul(a, u)) * sigmoid(t) + gelu(u, "tanh") - t / (sigmoid(u) + sigmoid(t));
    v = v * 0.5;
    return log_softmax(head(v.flatten(1).reshape({v.size(0), 4, 8})), -1);
  }
};

struct Tagger : nn::Module {
  nn::Embedding embed{20, 6};
  nn::Linear fc{6 * 7, 3};
  Tagger() { register_module("embed", embed), register_module("fc", fc); }
  Tensor forward(const Tensor& ids) override { return fc(embed(ids).flatten(1)); }
};

// samples/train_sequence_classifier.cpp's model: Embedding -> GRU (batch_first) -> h_n -> Linear
struct SequenceClassifier : nn::Module {
  nn::Embedding embed{16, 16};
  nn::GRU gru{16, 32, {.batch_first = true}};
  nn::Linear head{32, 2};
  SequenceClassifier() { register_module("embed", embed), register_module("gru", gru), register_module("head", head); }
  Tensor forward(const Tensor& ids) override {
    nn::RNNOutput r = gru.forward(embed(ids), Tensor());
    return head(r.h_n.squeeze(0));
  }
};

// The other recurrent forms: a 2-layer LSTM (batch_first) into a time-major tanh RNN.
struct Recurrent : nn::Module {
  nn::LSTM lstm{5, 12, {.num_layers = 2, .batch_first = true}};
  nn::RNN rnn{12, 7};
  nn::Linear head{7, 3};
  Recurrent() { register_module("lstm", lstm), register_module("rnn", rnn), register_module("head", head); }
  Tensor forward(const Tensor& x) override {
    Tensor y = lstm(x);                  // [B, T, 12]
    Tensor z = rnn(y.transpose(0, 1));   // [T, B, 7]
    return head(z.transpose(0, 1));      // [B, T, 3]
  }
};

void write_raw(const std::string& path, const Tensor& t) {
  Tensor c = t.detach().cpu().contiguous();
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(c.data_ptr()), std::streamsize(c.numel() * int64_t(c.element_size())));
}

std::string shape_json(const Tensor& t) {
  std::string s = "[";
  for (int d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

bool expect_refusal(const char* what, const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const Error& e) {
    if (std::string(e.what()).find(needle) != std::string::npos) {
      std::printf("refused as expected (%s): %s\n", what, e.what());
      return true;
    }
    std::fprintf(stderr, "%s: the error does not name '%s': %s\n", what, needle.c_str(), e.what());
    return false;
  }
  std::fprintf(stderr, "%s: exported, expected an error naming '%s'\n", what, needle.c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: export_models OUT_DIR\n");
    return 2;
  }
  std::string dir = argv[1];
  manual_seed(3);
  struct Case {
    std::string name;
    std::unique_ptr<nn::Module> model;
    std::function<Tensor(int64_t)> input;
  };
  auto images = [](int64_t n) { return rand({n, 1, 28, 28}); };
  std::vector<Case> cases;
  cases.push_back({"w1_mlp", std::make_unique<nn::Sequential>(w1_mlp()), images});
  cases.push_back({"w3_cnn", std::make_unique<nn::Sequential>(w3_cnn()), images});
  cases.push_back({"fashion_mlp", std::make_unique<nn::Sequential>(fashion::mlp()), images});
  cases.push_back({"fashion_cnn", std::make_unique<nn::Sequential>(fashion::cnn()), images});
  cases.push_back({"mixed", std::make_unique<Mixed>(), [](int64_t n) { return randn({n, 3, 8, 8}); }});
  cases.push_back({"tagger", std::make_unique<Tagger>(),
                   [](int64_t n) { return randint(0, 20, {n, 7}); }});
  cases.push_back({"sequence_gru", std::make_unique<SequenceClassifier>(),
                   [](int64_t n) { return randint(0, 16, {n, 11}); }});
  cases.push_back({"recurrent", std::make_unique<Recurrent>(), [](int64_t n) { return randn({n, 6, 5}); }});
  // nn::models at small inputs (the 224x224 runs belong to the benchmarks)
  cases.push_back({"resnet18", nn::models::resnet18({.num_classes = 10, .in_channels = 1}), images});
  cases.push_back({"resnet50", nn::models::resnet50({.num_classes = 10}), [](int64_t n) { return rand({n, 3, 32, 32}); }});
  cases.push_back({"densenet121", nn::models::densenet121({.num_classes = 10}),
                   [](int64_t n) { return rand({n, 3, 32, 32}); }});

  std::ofstream manifest(dir + "/manifest.json");
  manifest << "[\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    Case& c = cases[i];
    {  // a few training-mode passes, so batch norms have running statistics of their own
      NoGradGuard no_grad;
      for (int k = 0; k < 3; ++k) (*c.model)(c.input(16));
    }
    c.model->eval();
    std::string onnx = dir + "/" + c.name + ".onnx";
    onnx::export_model(*c.model, {c.input(3)}, onnx);
    Tensor x = c.input(5);
    Tensor y = no_grad([&] { return (*c.model)(x); });
    write_raw(dir + "/" + c.name + ".input.bin", x);
    write_raw(dir + "/" + c.name + ".output.bin", y);
    manifest << "  {\"name\": \"" << c.name << "\", \"input_shape\": " << shape_json(x) << ", \"input_dtype\": \""
             << dtype_name(x.dtype()) << "\", \"output_shape\": " << shape_json(y) << "}"
             << (i + 1 < cases.size() ? ",\n" : "\n");
    std::printf("exported %s\n", onnx.c_str());
  }
  manifest << "]\n";

  bool ok = true;
  nn::GRU gru(4, 8, {.batch_first = true, .bidirectional = true});
  ok &= expect_refusal("bidirectional GRU", [&] { onnx::export_model(gru, {randn({2, 5, 4})}, dir + "/gru.onnx"); },
                       "op gru");
  struct ScalarAdd : nn::Module {  // add's tape entry does not keep the scalar
    nn::Linear fc{4, 4};
    ScalarAdd() { register_module("fc", fc); }
    Tensor forward(const Tensor& x) override { return fc(x) + 1.0; }
  } scalar_add;
  ok &= expect_refusal("add of a scalar", [&] { onnx::export_model(scalar_add, {randn({2, 4})}, dir + "/add.onnx"); },
                       "op add");
  nn::Sequential train_mode{nn::Linear(4, 4), nn::Dropout(0.5)};
  ok &= expect_refusal("dropout in training mode",
                       [&] { onnx::export_model(train_mode, {randn({2, 4})}, dir + "/dropout.onnx"); }, "model.eval()");
  return ok && manifest ? 0 : 1;
}
