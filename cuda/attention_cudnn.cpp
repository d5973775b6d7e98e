// scaled_dot_product_attention in f16/bf16 through cuDNN's fused attention: the cuDNN
// frontend's sdpa and sdpa_backward graph nodes (REEL_CUDA_HALF_ATTENTION=cudnn; the rules
// in internal/half_attention.h). Compute-bound: the two products of each direction on tensor
// cores in the half dtype, softmax statistics and accumulation in f32, nothing of size
// L x S stored. The forward's statistics are reel's lse (log sum_j e^(s_ij), natural log,
// f32), so a backward may run on either path whatever path ran the forward.
// Dropout: cuDNN's Philox generator, seeded per call with reel's seed and offset (passed by
// value), so the backward replays the forward's mask; its bits are cuDNN's, not reel's.
// One graph per Key, built at the first call of its shape (never during a CUDA graph
// capture: the warm-up rule) and kept for the process; every call takes its workspace from
// the stream-ordered pool.
#include <cudnn.h>
#include <cudnn_frontend.h>

// The frontend's headers name NVRTC for one experimental engine (an sm100 RMSNorm+SiLU
// kernel compiled at run time) that reel never builds a graph for. Weak references keep
// libreel free of a libnvrtc dependency the GPU machines' PyTorch folders may not carry:
// unresolved, they are null and never called.
#pragma weak nvrtcCreateProgram
#pragma weak nvrtcCompileProgram
#pragma weak nvrtcDestroyProgram
#pragma weak nvrtcGetProgramLogSize
#pragma weak nvrtcGetProgramLog
#pragma weak nvrtcGetCUBINSize
#pragma weak nvrtcGetCUBIN

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "internal/backend.h"
#include "internal/context.h"
#include "internal/dnn.h"
#include "internal/graph.h"
#include "internal/half_attention.h"

namespace reel::cuda::half_attention {
namespace {

namespace fe = cudnn_frontend;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN refused the key's graph
  int64_t workspace = 0;
};

// A device's handle (on its stream) and plans; cuDNN handles are not for two threads at
// once, so both are used under `mu`. Made at the device's first call, kept to the process's
// end (tensors may be freed after main returns).
struct State {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  std::map<Key, Plan> plans;
};

State& state_of(Context& c, const char* op) {
  return dnn_state_of<State>(c, op,
                             "would create cuDNN's attention handle (the first f16/bf16 attention on this device); "
                             "run the step once before capturing it (the warm-up rule of cuda::Graph)");
}

fe::DataType_t io_type(DType t) { return t == DType::f16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16; }

std::vector<int64_t> vec(const std::array<int64_t, 4>& a) { return {a.begin(), a.end()}; }

TensorAttr input(fe::graph::Graph& g, const char* name, Uid uid, const Layout& l) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(vec(l.dim)).set_stride(vec(l.stride)));
}
void output(const TensorAttr& t, Uid uid, const Layout& l) {
  t->set_output(true).set_uid(uid).set_dim(vec(l.dim)).set_stride(vec(l.stride));
}

// What cuDNN answers for a graph it cannot run (a shape, head or GPU its engines do not
// serve): the call runs staged. Anything else is a fault worth an Error.
bool refused(fe::error_code_t code) {
  return code == fe::error_code_t::GRAPH_NOT_SUPPORTED || code == fe::error_code_t::HEURISTIC_QUERY_FAILED ||
         code == fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED;
}

std::string describe(const Key& k) {
  return fmt::format("{} {} [BH {}, L {}, S {}, E {}]{}{}", k.backward ? "backward" : "forward",
                     dtype_name(k.dtype), k.BH, k.L, k.S, k.E, k.causal ? " causal" : "",
                     k.dropout > 0 ? fmt::format(" dropout {}", k.dropout) : "");
}

Plan build(cudnnHandle_t handle, const Key& key, const char* op) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io_type(key.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const Layout ql = plane_layout(key.BH, key.L, key.E), kl = plane_layout(key.BH, key.S, key.E);
  const Layout sl = stats_layout(key.BH, key.L);
  TensorAttr q = input(*g, "q", kQ, ql), k = input(*g, "k", kK, kl), v = input(*g, "v", kV, kl);
  TensorAttr seed, offset;
  if (key.dropout > 0) {
    auto scalar = [&](const char* name, Uid uid) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({1, 1, 1, 1})
                           .set_stride({1, 1, 1, 1})
                           .set_data_type(fe::DataType_t::INT64)
                           .set_is_pass_by_value(true));
    };
    seed = scalar("seed", kSeed);
    offset = scalar("offset", kOffset);
  }
  if (!key.backward) {
    auto a = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(key.scale);
    if (key.causal) a.set_causal_mask(true);  // top-left aligned, as reel's and PyTorch's is_causal
    if (key.dropout > 0) a.set_dropout(key.dropout, seed, offset);
    auto [o, stats] = g->sdpa(q, k, v, std::move(a));
    output(o, kO, ql);
    output(stats, kStats, sl);
    stats->set_data_type(fe::DataType_t::FLOAT);
  } else {
    TensorAttr o = input(*g, "o", kO, ql), go = input(*g, "go", kGradO, ql);
    TensorAttr stats = input(*g, "stats", kStats, sl);
    stats->set_data_type(fe::DataType_t::FLOAT);
    auto a = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(key.scale);
    if (key.causal) a.set_causal_mask(true);
    if (key.dropout > 0) a.set_dropout(key.dropout, seed, offset);
    auto [gq, gk, gv] = g->sdpa_backward(q, k, v, o, go, stats, std::move(a));
    output(gq, kGradQ, ql);
    output(gk, kGradK, kl);
    output(gv, kGradV, kl);
  }
  fe::error_t e = g->validate();
  if (e.is_good()) e = g->build_operation_graph(handle);
  if (e.is_good()) e = g->create_execution_plans({fe::HeurMode_t::A});
  if (e.is_good()) e = g->check_support(handle);
  if (e.is_good()) e = g->build_plans(handle);
  if (e.is_bad()) {
    if (refused(e.get_code())) {
      // said once per shape: the user asked for cudnn, and this shape will not get it
      std::fprintf(stderr, "reel: cuDNN's fused attention refused %s (%s); that shape runs staged\n",
                   describe(key).c_str(), e.get_message().c_str());
      return {};
    }
    throw Error(fmt::format("{}: the cuDNN frontend failed to build the {} graph: {}", op, describe(key),
                            e.get_message()));
  }
  Plan plan{g, 0};
  e = g->get_workspace_size(plan.workspace);
  if (e.is_bad()) throw Error(fmt::format("{}: cuDNN's workspace size for {}: {}", op, describe(key), e.get_message()));
  return plan;
}

// Runs the key's graph on `pack`; false where cuDNN refused it
bool run(Context& c, const Key& key, std::unordered_map<int64_t, void*>& pack, const char* op) {
  State& st = state_of(c, op);
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.plans.find(key);
  if (it == st.plans.end()) {
    forbid_in_capture(c, op, "would build cuDNN's attention graph for a new shape; run the step once before "
                             "capturing it (the warm-up rule of cuda::Graph)");
    it = st.plans.emplace(key, build(st.handle, key, op)).first;
  }
  const Plan& plan = it->second;
  if (!plan.graph) return false;
  Tensor workspace = scratch(c, {std::max<int64_t>(plan.workspace, 1)}, DType::u8);
  fe::error_t e = plan.graph->execute(st.handle, pack, workspace.data_ptr());
  if (e.is_bad()) throw Error(fmt::format("{}: cuDNN's fused attention ({}) failed: {}", op, describe(key),
                                          e.get_message()));
  sync_if_debugging(op);
  return true;
}

Key key_of(const Context& c, bool backward, const Tensor& q, const Tensor& k, const AttentionParams& p) {
  return {c.device, backward, q.dtype(), q.size(0), q.size(1), k.size(1), q.size(2), p.causal, float(p.scale),
          float(p.dropout_p)};
}

// reel's Philox seed and offset, by value (host memory the pack points at, read when the
// graph is enqueued)
struct Philox {
  int64_t seed, offset;
  explicit Philox(const AttentionParams& p) : seed(int64_t(p.seed)), offset(int64_t(p.offset)) {}
  void add_to(std::unordered_map<int64_t, void*>& pack, const AttentionParams& p) {
    if (p.dropout_p <= 0) return;
    pack[kSeed] = &seed;
    pack[kOffset] = &offset;
  }
};

}  // namespace

bool cudnn_forward(Context& c, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                   const Tensor& v, const AttentionParams& p) {
  std::unordered_map<int64_t, void*> pack{{kQ, q.data_ptr()}, {kK, k.data_ptr()}, {kV, v.data_ptr()},
                                          {kO, out.data_ptr()}, {kStats, lse.data_ptr()}};
  Philox rng(p);
  rng.add_to(pack, p);
  return run(c, key_of(c, false, q, k, p), pack, "scaled_dot_product_attention");
}

bool cudnn_backward(Context& c, const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go,
                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                    const AttentionParams& p) {
  std::unordered_map<int64_t, void*> pack{{kQ, q.data_ptr()},   {kK, k.data_ptr()},      {kV, v.data_ptr()},
                                          {kO, out.data_ptr()}, {kGradO, go.data_ptr()}, {kStats, lse.data_ptr()},
                                          {kGradQ, gq.data_ptr()}, {kGradK, gk.data_ptr()}, {kGradV, gv.data_ptr()}};
  Philox rng(p);
  rng.add_to(pack, p);
  return run(c, key_of(c, true, q, k, p), pack, "scaled_dot_product_attention_backward");
}

}  // namespace reel::cuda::half_attention
