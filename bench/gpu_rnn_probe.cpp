// W9's GRU layer (T 150, batch 64, input 125, hidden 100, f32, one layer, one direction,
// double bias, training) through cuDNN directly in every data layout, algorithm, math type
// and padded-IO flag cuDNN 9 takes, then through reel's own path (nn::GRU on [64, 150, 125],
// batch_first as W9 runs it, and seq-first). Why: on the H200 W9's `gru` and `gru_backward`
// ops take 3.2 ms each while PyTorch's whole step takes 2.2 ms on the same cuDNN, and only
// these rows tell whether cuDNN itself is slow for reel's descriptors (seq_unpacked, standard,
// fma, padded_io off; marked like=reel) or reel's wrapper costs the time (reel's rows against
// that raw row). PyTorch's own choice for this layer (ATen's get_algo: persist_static_small_h
// for a GRU with hidden <= 128, padded IO on for unpacked input) is marked like=pytorch.
// math=default lets cuDNN use TF32 on the H200: a what-if, not W9's setting (TF32 off).
// Times: medians of 20 repetitions after 3 warm-ups, in microseconds, from CUDA events around
// each call (raw) or around the module call (reel's EventTimer), each repetition after a
// synchronisation, so a call's host work before its first kernel counts as it does in a step.
// A combination cuDNN refuses (a status other than success while setting up, sizing or
// running it) prints as refused=CALL:STATUS and the probe goes on. Without a GPU: one line,
// exit 77. Run by scripts/gpu-run.sh (step rnn_probe); bench/reference/gru_probe_pytorch.py
// prints PyTorch's rows.
#include <cuda_runtime.h>
#include <cudnn.h>
#include <reel/reel.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kT = 150, kB = 64, kI = 125, kH = 100;
constexpr int kWarm = 3, kReps = 20;

// A combination cuDNN does not run: which call said so, its status, and cuDNN's own words
// (cudnnGetLastErrorString, as cuda/context.cpp's fail_cudnn reads them) on one line.
struct Refused {
  std::string why, detail;
};
void dnn(cudnnStatus_t s, const char* call) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string d(detail);
  std::replace_if(d.begin(), d.end(), [](char c) { return c == '\n' || c == '"'; }, ' ');
  throw Refused{std::string(call) + ":" + cudnnGetErrorString(s), d};
}
// A CUDA runtime error is sticky (a fault poisons the context): nothing after it would measure.
void rt(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  std::printf("rnn_probe error %s: %s\n", call, cudaGetErrorString(e));
  std::exit(1);
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { rt(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};
struct RnnDescriptor {
  cudnnRNNDescriptor_t d = nullptr;
  RnnDescriptor() { dnn(cudnnCreateRNNDescriptor(&d), "cudnnCreateRNNDescriptor"); }
  ~RnnDescriptor() { cudnnDestroyRNNDescriptor(d); }
  RnnDescriptor(const RnnDescriptor&) = delete;
  RnnDescriptor& operator=(const RnnDescriptor&) = delete;
};
struct DataDescriptor {
  cudnnRNNDataDescriptor_t d = nullptr;
  DataDescriptor() { dnn(cudnnCreateRNNDataDescriptor(&d), "cudnnCreateRNNDataDescriptor"); }
  ~DataDescriptor() { cudnnDestroyRNNDataDescriptor(d); }
  DataDescriptor(const DataDescriptor&) = delete;
  DataDescriptor& operator=(const DataDescriptor&) = delete;
};

// Values in [-0.1, 0.1]: no overflow however often the weight gradients add up.
void fill(void* dst, size_t bytes, unsigned seed) {
  std::vector<float> v(bytes / sizeof(float));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.1f, 0.1f);
  for (float& f : v) f = dist(gen);
  rt(cudaMemcpy(dst, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
}

double median_us(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  size_t n = ms.size();
  return 1e3 * (n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]));
}

// What every combination shares: the handle on the probe's stream, the layer's tensors.
struct Raw {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnTensorDescriptor_t h = nullptr;
  cudaEvent_t ev[4] = {};
  DeviceBuffer x{size_t(kT) * kB * kI * 4}, dx{size_t(kT) * kB * kI * 4}, y{size_t(kT) * kB * kH * 4},
      dy{size_t(kT) * kB * kH * 4}, hx{size_t(kB) * kH * 4}, hy{size_t(kB) * kH * 4}, dhy{size_t(kB) * kH * 4},
      dhx{size_t(kB) * kH * 4}, lengths{size_t(kB) * 4};
};

// The three calls of one training step of the layer, each timed, under `rnn` and `layout`:
// medians in us (forward, backward data, backward weights).
std::vector<double> time_calls(Raw& r, cudnnRNNDescriptor_t rnn, cudnnRNNDataLayout_t layout, size_t wbytes,
                               void* w, void* dw) {
  std::vector<int> lengths(kB, kT);
  float pad = 0;
  DataDescriptor xd, yd;
  dnn(cudnnSetRNNDataDescriptor(xd.d, CUDNN_DATA_FLOAT, layout, kT, kB, kI, lengths.data(), &pad), "x_descriptor");
  dnn(cudnnSetRNNDataDescriptor(yd.d, CUDNN_DATA_FLOAT, layout, kT, kB, kH, lengths.data(), &pad), "y_descriptor");
  size_t work_bytes = 0, reserve_bytes = 0;
  dnn(cudnnGetRNNTempSpaceSizes(r.handle, rnn, CUDNN_FWD_MODE_TRAINING, xd.d, &work_bytes, &reserve_bytes),
      "cudnnGetRNNTempSpaceSizes");
  DeviceBuffer work(work_bytes), reserve(reserve_bytes);
  auto* seq = static_cast<const int32_t*>(r.lengths.p);
  std::vector<double> ms[3];
  for (int rep = 0; rep < kWarm + kReps; ++rep) {
    // ADD accumulates: start each repetition from zero, outside the timed calls
    rt(cudaMemsetAsync(dw, 0, wbytes, r.stream), "cudaMemsetAsync");
    rt(cudaEventRecord(r.ev[0], r.stream), "cudaEventRecord");
    dnn(cudnnRNNForward(r.handle, rnn, CUDNN_FWD_MODE_TRAINING, seq, xd.d, r.x.p, yd.d, r.y.p, r.h, r.hx.p, r.hy.p,
                        r.h, nullptr, nullptr, wbytes, w, work_bytes, work.p, reserve_bytes, reserve.p),
        "cudnnRNNForward");
    rt(cudaEventRecord(r.ev[1], r.stream), "cudaEventRecord");
    dnn(cudnnRNNBackwardData_v8(r.handle, rnn, seq, yd.d, r.y.p, r.dy.p, xd.d, r.dx.p, r.h, r.hx.p, r.dhy.p, r.dhx.p,
                                r.h, nullptr, nullptr, nullptr, wbytes, w, work_bytes, work.p, reserve_bytes,
                                reserve.p),
        "cudnnRNNBackwardData_v8");
    rt(cudaEventRecord(r.ev[2], r.stream), "cudaEventRecord");
    dnn(cudnnRNNBackwardWeights_v8(r.handle, rnn, CUDNN_WGRAD_MODE_ADD, seq, xd.d, r.x.p, r.h, r.hx.p, yd.d, r.y.p,
                                   wbytes, dw, work_bytes, work.p, reserve_bytes, reserve.p),
        "cudnnRNNBackwardWeights_v8");
    rt(cudaEventRecord(r.ev[3], r.stream), "cudaEventRecord");
    rt(cudaEventSynchronize(r.ev[3]), "cudaEventSynchronize");
    if (rep < kWarm) continue;
    for (int k = 0; k < 3; ++k) {
      float t = 0;
      rt(cudaEventElapsedTime(&t, r.ev[k], r.ev[k + 1]), "cudaEventElapsedTime");
      ms[k].push_back(t);
    }
  }
  return {median_us(ms[0]), median_us(ms[1]), median_us(ms[2])};
}

template <class E>
struct Named {
  E value;
  const char* name;
};
const Named<cudnnRNNDataLayout_t> kLayouts[] = {{CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, "seq_unpacked"},
                                                {CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, "seq_packed"},
                                                {CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, "batch_unpacked"}};
// dynamic last: cudnnBuildRNNDynamic compiles at run time, and a step's limit cuts the end
const Named<cudnnRNNAlgo_t> kAlgos[] = {{CUDNN_RNN_ALGO_STANDARD, "standard"},
                                        {CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H, "persist_static_small_h"},
                                        {CUDNN_RNN_ALGO_PERSIST_STATIC, "persist_static"},
                                        {CUDNN_RNN_ALGO_PERSIST_DYNAMIC, "persist_dynamic"}};
const Named<cudnnMathType_t> kMaths[] = {{CUDNN_FMA_MATH, "fma"}, {CUDNN_DEFAULT_MATH, "default"}};
const Named<uint32_t> kPadded[] = {{CUDNN_RNN_PADDED_IO_DISABLED, "off"}, {CUDNN_RNN_PADDED_IO_ENABLED, "on"}};

// One RNN descriptor (algorithm, math, padded IO), each layout under it: a line per layout.
void probe_descriptor(Raw& r, const Named<cudnnRNNAlgo_t>& algo, const Named<cudnnMathType_t>& math,
                      const Named<uint32_t>& padded) {
  auto head = [&](const Named<cudnnRNNDataLayout_t>& layout) {
    std::printf("rnn_probe layout=%s algo=%s math=%s padded_io=%s", layout.name, algo.name, math.name, padded.name);
  };
  auto like = [&](const Named<cudnnRNNDataLayout_t>& layout) -> const char* {
    if (layout.value != CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED || math.value != CUDNN_FMA_MATH) return "";
    if (algo.value == CUDNN_RNN_ALGO_STANDARD && padded.value == CUDNN_RNN_PADDED_IO_DISABLED) return " like=reel";
    if (algo.value == CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H && padded.value == CUDNN_RNN_PADDED_IO_ENABLED)
      return " like=pytorch";
    return "";
  };
  // a refusal must leave no fault behind (the rows after it would lie): a sticky error shows
  // at the synchronisation; a runtime error cuDNN met and answered with its status is cleared
  auto refused = [&](const Named<cudnnRNNDataLayout_t>& layout, const Refused& e) {
    head(layout);
    std::printf(" refused=%s%s detail=\"%s\"\n", e.why.c_str(), like(layout), e.detail.c_str());
    rt(cudaStreamSynchronize(r.stream), "the stream after a refused call");
    (void)cudaGetLastError();
  };
  try {
    RnnDescriptor rnn;
    dnn(cudnnSetRNNDescriptor_v8(rnn.d, algo.value, CUDNN_GRU, CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL,
                                 CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, math.value, kI, kH, kH, 1,
                                 r.dropout, padded.value),
        "cudnnSetRNNDescriptor_v8");
    if (algo.value == CUDNN_RNN_ALGO_PERSIST_DYNAMIC)  // its kernels are compiled for the batch size first
      dnn(cudnnBuildRNNDynamic(r.handle, rnn.d, kB), "cudnnBuildRNNDynamic");
    size_t wbytes = 0;
    dnn(cudnnGetRNNWeightSpaceSize(r.handle, rnn.d, &wbytes), "cudnnGetRNNWeightSpaceSize");
    DeviceBuffer w(wbytes), dw(wbytes);
    fill(w.p, wbytes, 3);
    for (const auto& layout : kLayouts) {
      try {
        std::vector<double> us = time_calls(r, rnn.d, layout.value, wbytes, w.p, dw.p);
        head(layout);
        std::printf(" fwd_us=%.1f bwd_data_us=%.1f bwd_weights_us=%.1f total_us=%.1f%s\n", us[0], us[1], us[2],
                    us[0] + us[1] + us[2], like(layout));
      } catch (const Refused& e) {
        refused(layout, e);
      }
    }
  } catch (const Refused& e) {  // the descriptor itself: every layout under it is refused
    for (const auto& layout : kLayouts) refused(layout, e);
  }
  std::fflush(stdout);
}

void probe_cudnn() {
  Raw r;
  rt(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  for (cudaEvent_t& e : r.ev) rt(cudaEventCreate(&e), "cudaEventCreate");
  try {
    dnn(cudnnCreate(&r.handle), "cudnnCreate");
    dnn(cudnnSetStream(r.handle, r.stream), "cudnnSetStream");
    // probability 0 and no states, as ATen's set_no_dropout: one layer has no dropout anyway
    dnn(cudnnCreateDropoutDescriptor(&r.dropout), "cudnnCreateDropoutDescriptor");
    dnn(cudnnSetDropoutDescriptor(r.dropout, r.handle, 0.0f, nullptr, 0, 0), "cudnnSetDropoutDescriptor");
    int dims[3] = {1, kB, kH}, strides[3] = {kB * kH, kH, 1};
    dnn(cudnnCreateTensorDescriptor(&r.h), "cudnnCreateTensorDescriptor");
    dnn(cudnnSetTensorNdDescriptor(r.h, CUDNN_DATA_FLOAT, 3, dims, strides), "h_descriptor");
  } catch (const Refused& e) {
    std::printf("rnn_probe error cuDNN setup: %s (%s)\n", e.why.c_str(), e.detail.c_str());
    std::exit(1);
  }
  std::vector<int32_t> lengths(kB, kT);
  rt(cudaMemcpy(r.lengths.p, lengths.data(), lengths.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  fill(r.x.p, size_t(kT) * kB * kI * 4, 1);
  fill(r.dy.p, size_t(kT) * kB * kH * 4, 2);
  for (void* p : {r.hx.p, r.dhy.p}) rt(cudaMemset(p, 0, size_t(kB) * kH * 4), "cudaMemset");
  // reel's descriptor and PyTorch's first, then every other combination
  probe_descriptor(r, kAlgos[0], kMaths[0], kPadded[0]);
  probe_descriptor(r, kAlgos[1], kMaths[0], kPadded[1]);
  for (const auto& algo : kAlgos)
    for (const auto& math : kMaths)
      for (const auto& padded : kPadded) {
        bool done = &math == &kMaths[0] && ((&algo == &kAlgos[0] && &padded == &kPadded[0]) ||
                                            (&algo == &kAlgos[1] && &padded == &kPadded[1]));
        if (!done) probe_descriptor(r, algo, math, padded);
      }
  cudnnDestroyTensorDescriptor(r.h);
  cudnnDestroyDropoutDescriptor(r.dropout);
  cudnnDestroy(r.handle);
  for (cudaEvent_t e : r.ev) cudaEventDestroy(e);
  cudaStreamDestroy(r.stream);
}

// reel's path for the layer, as W9 calls it: the module, its weights packed per call, the
// batch_first transposes (or none, seq-first), the autograd record; x needs no gradient
// (cuDNN's backward data runs for the weights' gradient either way), gradients set to none
// before each repetition, outside the time.
void probe_reel(bool batch_first) {
  using namespace reel;
  const Device gpu = Device::cuda(0);
  manual_seed(1);
  nn::GRU gru(kI, kH, {.batch_first = batch_first});
  gru.to(gpu);
  Tensor x = randn(batch_first ? Dims{kB, kT, kI} : Dims{kT, kB, kI}, {.device = gpu});
  Tensor gy = randn(batch_first ? Dims{kB, kT, kH} : Dims{kT, kB, kH}, {.device = gpu});
  cuda::EventTimer timer(0);
  double us[2];
  for (int backward = 0; backward < 2; ++backward) {
    std::vector<double> ms;
    for (int rep = 0; rep < kWarm + kReps; ++rep) {
      gru.zero_grad();
      cuda::synchronize(0);
      timer.start();
      Tensor y = gru(x);
      if (backward) y.backward(gy);
      timer.stop();
      double s = timer.seconds();
      if (rep >= kWarm) ms.push_back(1e3 * s);
    }
    us[backward] = median_us(ms);
  }
  std::printf("rnn_probe reel input=%s path=%s fwd_us=%.1f fwd_bwd_us=%.1f\n",
              batch_first ? "batch_first" : "seq_first",
              cuda::cudnn_rnn() == cuda::CudnnRnn::stack ? "stack" : "layers", us[0], us[1]);
  std::fflush(stdout);
}

}  // namespace

int main() {
  // before any CUDA call: without a driver the runtime must not be asked anything
  if (!reel::cuda::is_available()) {
    std::printf("rnn_probe skipped: no CUDA device (%s)\n", reel::cuda::unavailable_reason().c_str());
    return 77;
  }
  reel::cuda::set_allow_tf32(false);  // W9's setting (reel's default)
  std::printf("rnn_probe setup gpu=\"%s\" cudnn=%zu T=%d B=%d input=%d hidden=%d f32 warm=%d reps=%d\n",
              reel::cuda::device_name(0).c_str(), cudnnGetVersion(), kT, kB, kI, kH, kWarm, kReps);
  std::fflush(stdout);
  // reel's rows first: seconds, where cuDNN's 48 rows may meet the step's limit
  for (bool batch_first : {true, false}) {
    try {
      probe_reel(batch_first);
    } catch (const std::exception& e) {  // cuDNN's rows still come
      std::printf("rnn_probe reel error: %s\n", e.what());
    }
  }
  probe_cudnn();
  return 0;
}
