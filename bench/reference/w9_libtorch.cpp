// W9 in libtorch 1.13: the GRU-IMDB model of bench/w9_gru_imdb.cpp (torch::nn::GRU),
// the same steps, batches and timing.
#include "torch_bench.h"

int main(int argc, char** argv) {
  namespace nn = torch::nn;
  bench::Args args = bench::parse_args(argc, argv);
  bench::Target t = bench::setup(args);
  int64_t steps = args.get("--steps", 40);
  const int64_t N = 25000, T = 150, B = 64, V = 30000, E = 125, H = 100;
  torch::manual_seed(1);
  nn::Embedding emb(V, E);
  nn::GRU gru(nn::GRUOptions(E, H).batch_first(true));
  nn::Linear fc(H, 2);
  emb->to(t.device), gru->to(t.device), fc->to(t.device);
  std::vector<torch::Tensor> params;
  for (auto& p : emb->parameters()) params.push_back(p);
  for (auto& p : gru->parameters()) params.push_back(p);
  for (auto& p : fc->parameters()) params.push_back(p);
  torch::optim::Adam opt(params, torch::optim::AdamOptions(1e-3));
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(t.device);
  torch::Tensor ids = torch::randint(0, V, {N, T}, i64);
  torch::Tensor labels = torch::randint(0, 2, {N}, i64);
  int64_t batch_index = 0;
  auto step = [&] {
    int64_t start = batch_index * B % N, n = std::min(B, N - start);
    ++batch_index;
    torch::Tensor out = std::get<0>(gru->forward(emb->forward(ids.narrow(0, start, n))));
    torch::Tensor loss = torch::nn::functional::cross_entropy(fc->forward(out.select(1, T - 1)),
                                                              labels.narrow(0, start, n));
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  for (int i = 0; i < 3; ++i) step();
  std::vector<double> epoch_s, step_ms;
  for (int rep = 0; rep < args.reps; ++rep) {
    batch_index = 0;
    int64_t count = steps > 0 ? steps : (N + B - 1) / B;
    double t0 = bench::now_s();
    torch::Tensor loss;
    for (int64_t i = 0; i < count; ++i) loss = step();
    loss.item<float>();
    double s = bench::now_s() - t0;
    epoch_s.push_back(steps > 0 ? s / double(count) * double(N) / double(B) : s);
    step_ms.push_back(1e3 * s / double(count));
  }
  bench::report(args, "W9", "libtorch", t.name.c_str(), "epoch_s", epoch_s);
  bench::report(args, "W9", "libtorch", t.name.c_str(), "step_ms", step_ms);
  return 0;
}
