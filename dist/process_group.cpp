// The process group on MPI: initialisation, the descriptor check, the CPU collectives
// (CUDA tensors go to dist/nccl.cpp), nonblocking all-reduce, and the fault handling
// that turns an error on one rank into the end of the job on all of them.
#include "process_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "../autograd/grad_mode.h"
#include "internal/state.h"

namespace reel::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

void check_mpi(int rc, const char* op, const Site& site) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail(op, fmt::format("MPI failed: {}", std::string(msg, size_t(len))), site);
}

namespace {

// After a timeout: every rank that timed out sends the others where it waits ("<seq>
// <op>: <what>") on a communicator of its own, and listens as long for theirs. A rank
// that answers with the same sequence number waits in the same collective; a smaller
// one is still in an earlier collective; no answer: stuck outside MPI, or gone.
constexpr int kWhereBytes = 160;
}  // namespace

[[noreturn]] void report_timeout(GroupState& g, const char* op, const std::string& what, uint64_t seq) {
  char mine[kWhereBytes] = {};
  std::snprintf(mine, sizeof mine, "%llu %s%s%s", (unsigned long long)seq, op, what.empty() ? "" : ": ",
                what.c_str());
  std::vector<MPI_Request> reqs;
  std::vector<std::vector<char>> theirs(size_t(g.size), std::vector<char>(kWhereBytes, '\0'));
  std::vector<int> from;
  for (int r = 0; r < g.size; ++r) {
    if (r == g.rank) continue;
    reqs.emplace_back();
    MPI_Isend(mine, kWhereBytes, MPI_CHAR, r, 7, g.fault_comm, &reqs.back());
  }
  size_t first_recv = reqs.size();
  for (int r = 0; r < g.size; ++r) {
    if (r == g.rank) continue;
    reqs.emplace_back();
    MPI_Irecv(theirs[size_t(r)].data(), kWhereBytes, MPI_CHAR, r, 7, g.fault_comm, &reqs.back());
    from.push_back(r);
  }
  // the others time out up to the skew of their arrivals later: listen a while for them
  const double listen_s = std::min(10.0, std::max(1.0, g.timeout_s));
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(listen_s);
  std::vector<bool> heard(from.size(), false);
  while (std::chrono::steady_clock::now() < until) {
    bool all = true;
    for (size_t i = 0; i < from.size(); ++i) {
      if (heard[i]) continue;
      int flag = 0;
      MPI_Test(&reqs[first_recv + i], &flag, MPI_STATUS_IGNORE);
      heard[i] = flag != 0;
      all = all && heard[i];
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string missing, elsewhere, waiting;
  for (size_t i = 0; i < from.size(); ++i) {
    int r = from[i];
    if (!heard[i]) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      continue;
    }
    const char* text = theirs[size_t(r)].data();
    unsigned long long their_seq = std::strtoull(text, nullptr, 10);
    const char* where = std::strchr(text, ' ');
    if (their_seq == seq) waiting += (waiting.empty() ? "" : ", ") + std::to_string(r);
    else
      elsewhere += fmt::format("{}rank {} waits in collective #{} ({})", elsewhere.empty() ? "" : "; ", r, their_seq,
                               where ? where + 1 : "?");
  }
  std::string msg = fmt::format("{}{} (collective #{} of this rank) did not complete within {} s", op,
                                what.empty() ? "" : " [" + what + "]", seq, g.timeout_s);
  if (!missing.empty())
    msg += fmt::format("; rank(s) {} did not arrive (no word from them in {} s: stuck outside the collectives, or "
                       "gone)", missing, listen_s);
  if (!elsewhere.empty()) msg += "; " + elsewhere;
  if (!waiting.empty()) msg += fmt::format("; rank(s) {} wait in it too", waiting);
  msg += " (the limit: dist::InitOptions::timeout_s or REEL_DIST_TIMEOUT)";
  abort(msg);
}

void wait_request(GroupState& g, MPI_Request& req, const char* op, const std::string& what, uint64_t seq) {
  // MPI_Test advances the collective (OpenMPI's progress yields the core when oversubscribed,
  // as MPI_Wait does); the clock is read every few hundred tests
  int flag = 0;
  check_mpi(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), op, Site(nullptr, 0));
  if (flag) return;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(g.timeout_s);
  for (unsigned n = 1;; ++n) {
    check_mpi(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), op, Site(nullptr, 0));
    if (flag) return;
    if (n % 256 == 0 && std::chrono::steady_clock::now() > deadline) report_timeout(g, op, what, seq);
  }
}

namespace {

ProcessGroup* g_world = nullptr;
bool g_finalized = false;

// An exception escaping main() on one rank would leave its peers waiting in their next
// collective; MPI_Abort ends them all, after the message.
void terminate_with_abort() {
  std::string what = "terminate called";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = fmt::format("uncaught exception: {}", ex.what());
    } catch (...) {
      what = "uncaught exception of unknown type";
    }
  }
  abort(what);
}

void finalize_at_exit() { finalize(); }

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_SIZE",
                        "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8:
    case DType::boolean: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;  // f16, bf16: computed in f32 (host_buffer)
  }
}

MPI_Op mpi_op(ReduceOp op, DType d, const char* name, const Site& site) {
  if (op == ReduceOp::avg && !is_floating(d))
    fail(name, fmt::format("avg needs a floating-point tensor, got {}", dtype_name(d)), site);
  if (d == DType::boolean) return op == ReduceOp::min ? MPI_BAND : MPI_BOR;  // and / or
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

// A contiguous CPU tensor MPI can read and write: `t` itself when it is one, else a
// copy (f16 and bf16 as f32) that write_back() copies into `t`.
Tensor host_buffer(const Tensor& t) {
  if (t.dtype() == DType::f16 || t.dtype() == DType::bf16) return t.to(DType::f32).contiguous();
  if (t.is_contiguous()) return t;
  return t.contiguous();
}
void write_back(const Tensor& t, const Tensor& buf) {
  if (buf.impl() == t.impl()) return;
  NoGradGuard no_grad;
  Tensor(t).copy_(buf.to(t.dtype()));
}

void scale(const Tensor& t, double factor) {
  NoGradGuard no_grad;
  Tensor(t).mul_(factor);
}

enum Kind : int64_t { kAllReduce = 1, kBroadcast, kAllGather, kReduceScatter, kBarrier };
const char* kind_name(int64_t k) {
  switch (k) {
    case kAllReduce: return "all_reduce";
    case kBroadcast: return "broadcast";
    case kAllGather: return "all_gather";
    case kReduceScatter: return "reduce_scatter";
    case kBarrier: return "barrier";
  }
  return "?";
}

// What a rank passed to a collective, in 12 integers: kind, dtype, root or op, rank
// count, dims (up to 7; more are folded into the last slot).
constexpr int kDesc = 12;
struct Desc {
  int64_t v[kDesc] = {};
};
Desc describe(int64_t kind, const Tensor* t, int64_t arg) {
  Desc d;
  d.v[0] = kind;
  d.v[2] = arg;
  if (!t) return d;
  d.v[1] = int64_t(t->dtype());
  const Dims& s = t->shape();
  d.v[3] = int64_t(s.size());
  for (int i = 0; i < s.size(); ++i) {
    if (i < 7) d.v[4 + i] = s[i];
    else d.v[11] = d.v[11] * 1000003 + s[i];
  }
  return d;
}
std::string desc_str(const Desc& d) {
  std::string s = "[";
  for (int64_t i = 0; i < d.v[3] && i < 7; ++i) s += (i ? ", " : "") + std::to_string(d.v[4 + i]);
  if (d.v[3] > 7) s += ", ...";
  return s + "] " + dtype_name(DType(d.v[1]));
}

// Every rank learns every rank's descriptor, so all of them throw the same Error.
void check_descriptors(GroupState& g, const char* op, const Desc& mine, const Site& site) {
  if (!g.opt.check_shapes || g.size == 1) return;
  std::vector<Desc> all(size_t(g.size));
  MPI_Request req;
  check_mpi(MPI_Iallgather(mine.v, kDesc, MPI_INT64_T, all.data(), kDesc, MPI_INT64_T, g.comm, &req), op, site);
  wait_request(g, req, op, "its shape check", g.seq);
  for (int r = 1; r < g.size; ++r) {
    const Desc& a = all[0];
    const Desc& b = all[size_t(r)];
    if (a.v[0] != b.v[0])
      fail(op, fmt::format("the ranks called different collectives: rank 0 {}, rank {} {}", kind_name(a.v[0]), r,
                           kind_name(b.v[0])), site);
    if (a.v[2] != b.v[2])
      fail(op, fmt::format("the ranks passed different {}: rank 0 {}, rank {} {}",
                           a.v[0] == kBroadcast ? "roots" : "reduce ops", a.v[2], r, b.v[2]), site);
    bool same = true;
    for (int i = 1; i < kDesc; ++i) same = same && a.v[i] == b.v[i];
    if (!same)
      fail(op, fmt::format("the ranks passed different tensors: rank 0 {}, rank {} {} (every rank must pass the "
                           "same shape and dtype)", desc_str(a), r, desc_str(b)), site);
  }
}

GroupState& state_of(const ProcessGroup& pg) { return pg.state(); }

}  // namespace

// ---- Work

struct WorkState {
  MPI_Request req = MPI_REQUEST_NULL;
  GroupState* g = nullptr;
  std::string what;
  uint64_t seq = 0;
  Tensor t;
  double factor = 1.0;  // avg: 1 / size
  bool done = false;
  void finish() {
    done = true;
    if (factor != 1.0) scale(t, factor);
  }
  ~WorkState() {
    if (!done && req != MPI_REQUEST_NULL) MPI_Wait(&req, MPI_STATUS_IGNORE);
  }
};

bool Work::test() {
  if (!s_ || s_->done) return true;
  int flag = 0;
  check_mpi(MPI_Test(&s_->req, &flag, MPI_STATUS_IGNORE), "all_reduce_async", Site(nullptr, 0));
  if (flag) s_->finish();
  return flag != 0;
}

void Work::wait() {
  if (!s_ || s_->done) return;
  wait_request(*s_->g, s_->req, "all_reduce_async", s_->what, s_->seq);
  s_->finish();
}

// ---- ProcessGroup

ProcessGroup::ProcessGroup(std::unique_ptr<GroupState> s) : s_(std::move(s)) {}
ProcessGroup::~ProcessGroup() = default;
int ProcessGroup::rank() const { return s_->rank; }
int ProcessGroup::size() const { return s_->size; }
int ProcessGroup::local_rank() const { return s_->local_rank; }
int ProcessGroup::local_size() const { return s_->local_size; }
bool ProcessGroup::threads_may_call() const { return s_->thread_level >= MPI_THREAD_SERIALIZED; }
const CommStats& ProcessGroup::stats() const { return s_->stats; }
double ProcessGroup::timeout_s() const { return s_->timeout_s; }
void ProcessGroup::reset_stats() { s_->stats = {}; }

void ProcessGroup::all_reduce(const Tensor& t, ReduceOp op, Site site) {
  const char* name = "all_reduce";
  GroupState& g = *s_;
  if (!t.defined()) fail(name, "expected a tensor, got an undefined one", site);
  g.seq++;
  check_descriptors(g, name, describe(kAllReduce, &t, int64_t(op)), site);
  g.stats.collectives++;
  g.stats.all_reduce_bytes += uint64_t(t.numel()) * t.element_size();
  if (t.device().is_cuda()) return nccl::all_reduce(g, t, op, site);
  MPI_Op mop = mpi_op(op, t.dtype(), name, site);
  Tensor buf = host_buffer(t);
  MPI_Request req;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf.data_ptr(), int(buf.numel()), mpi_type(buf.dtype()), mop, g.comm, &req),
            name, site);
  wait_request(g, req, name, {}, g.seq);
  if (op == ReduceOp::avg) scale(buf, 1.0 / g.size);
  write_back(t, buf);
}

void ProcessGroup::broadcast(const Tensor& t, int root, Site site) {
  const char* name = "broadcast";
  GroupState& g = *s_;
  if (!t.defined()) fail(name, "expected a tensor, got an undefined one", site);
  if (root < 0 || root >= g.size) fail(name, fmt::format("root must be in [0, {}), got {}", g.size, root), site);
  g.seq++;
  check_descriptors(g, name, describe(kBroadcast, &t, root), site);
  g.stats.collectives++;
  g.stats.broadcast_bytes += uint64_t(t.numel()) * t.element_size();
  // an in-place write: autocast's kept copy of a parameter (and a saved tensor's check) must see it
  t.storage()->bump_version();
  if (t.device().is_cuda()) return nccl::broadcast(g, t, root, site);
  Tensor buf = host_buffer(t);
  MPI_Request req;
  check_mpi(MPI_Ibcast(buf.data_ptr(), int(buf.numel()), mpi_type(buf.dtype()), root, g.comm, &req), name, site);
  wait_request(g, req, name, {}, g.seq);
  write_back(t, buf);
}

std::vector<Tensor> ProcessGroup::all_gather(const Tensor& t, Site site) {
  const char* name = "all_gather";
  GroupState& g = *s_;
  if (!t.defined()) fail(name, "expected a tensor, got an undefined one", site);
  g.seq++;
  check_descriptors(g, name, describe(kAllGather, &t, 0), site);
  g.stats.collectives++;
  g.stats.all_gather_bytes += uint64_t(t.numel()) * t.element_size();
  Dims shape = t.shape();
  shape.insert(0, g.size);
  Tensor out = empty(shape, {.dtype = t.dtype(), .device = t.device()});
  if (t.device().is_cuda()) {
    nccl::all_gather(g, t.contiguous(), out, site);
  } else {
    Tensor in = host_buffer(t);
    Tensor recv = in.dtype() == t.dtype() ? out : empty(shape, {.dtype = in.dtype()});
    MPI_Request req;
    check_mpi(MPI_Iallgather(in.data_ptr(), int(in.numel()), mpi_type(in.dtype()), recv.data_ptr(), int(in.numel()),
                             mpi_type(in.dtype()), g.comm, &req), name, site);
    wait_request(g, req, name, {}, g.seq);
    write_back(out, recv);
  }
  std::vector<Tensor> parts;
  for (int r = 0; r < g.size; ++r) parts.push_back(out.select(0, r));
  return parts;
}

Tensor ProcessGroup::reduce_scatter(const Tensor& t, ReduceOp op, Site site) {
  const char* name = "reduce_scatter";
  GroupState& g = *s_;
  if (!t.defined()) fail(name, "expected a tensor, got an undefined one", site);
  if (t.dim() == 0 || t.size(0) % g.size != 0)
    fail(name, fmt::format("expected a first dimension divisible by the {} ranks, got {}", g.size, t.shape().str()),
         site);
  g.seq++;
  check_descriptors(g, name, describe(kReduceScatter, &t, int64_t(op)), site);
  g.stats.collectives++;
  g.stats.reduce_scatter_bytes += uint64_t(t.numel()) * t.element_size();
  Dims shape = t.shape();
  shape[0] /= g.size;
  Tensor out = empty(shape, {.dtype = t.dtype(), .device = t.device()});
  if (t.device().is_cuda()) {
    nccl::reduce_scatter(g, t.contiguous(), out, op, site);
    return out;
  }
  MPI_Op mop = mpi_op(op, t.dtype(), name, site);
  Tensor in = host_buffer(t);
  Tensor recv = in.dtype() == t.dtype() ? out : empty(shape, {.dtype = in.dtype()});
  MPI_Request req;
  check_mpi(MPI_Ireduce_scatter_block(in.data_ptr(), recv.data_ptr(), int(recv.numel()), mpi_type(in.dtype()), mop,
                                      g.comm, &req), name, site);
  wait_request(g, req, name, {}, g.seq);
  if (op == ReduceOp::avg) scale(recv, 1.0 / g.size);
  write_back(out, recv);
  return out;
}

void ProcessGroup::barrier(Site site) {
  GroupState& g = *s_;
  g.seq++;
  check_descriptors(g, "barrier", describe(kBarrier, nullptr, 0), site);
  MPI_Request req;
  check_mpi(MPI_Ibarrier(g.comm, &req), "barrier", site);
  wait_request(g, req, "barrier", {}, g.seq);
}

Work ProcessGroup::all_reduce_async(const Tensor& t, ReduceOp op, std::string what) {
  const char* name = "all_reduce_async";
  Site site(nullptr, 0);
  GroupState& g = *s_;
  if (t.device().is_cuda() || !t.is_contiguous() || mpi_type(t.dtype()) == MPI_DATATYPE_NULL)
    fail(name, fmt::format("expected a contiguous CPU tensor of f32, f64, i32, i64 or u8, got {} {} on {}",
                           t.shape().str(), dtype_name(t.dtype()), t.device().str()), site);
  auto w = std::make_shared<WorkState>();
  w->t = t;
  w->g = &g;
  w->what = std::move(what);
  w->seq = ++g.seq;
  w->factor = op == ReduceOp::avg ? 1.0 / g.size : 1.0;
  g.stats.collectives++;
  g.stats.all_reduce_bytes += uint64_t(t.numel()) * t.element_size();
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), int(t.numel()), mpi_type(t.dtype()),
                           mpi_op(op, t.dtype(), name, site), g.async_comm, &w->req), name, site);
  return Work(std::move(w));
}

void ProcessGroup::check_same(const char* op, const std::string& what, Site site) {
  GroupState& g = *s_;
  if (g.size == 1) return;
  int len = int(what.size());
  std::vector<int> lens(size_t(g.size));
  uint64_t seq = ++g.seq;
  MPI_Request req;
  check_mpi(MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, g.comm, &req), op, site);
  wait_request(g, req, op, "the lengths of what it compares", seq);
  std::vector<int> offsets(size_t(g.size), 0);
  for (int r = 1; r < g.size; ++r) offsets[size_t(r)] = offsets[size_t(r - 1)] + lens[size_t(r - 1)];
  std::string all(size_t(offsets.back() + lens.back()), '\0');
  check_mpi(MPI_Iallgatherv(what.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, g.comm, &req),
            op, site);
  wait_request(g, req, op, "what it compares", seq);
  std::string first = all.substr(0, size_t(lens[0]));
  for (int r = 1; r < g.size; ++r) {
    std::string other = all.substr(size_t(offsets[size_t(r)]), size_t(lens[size_t(r)]));
    if (other != first)
      fail(op, fmt::format("the ranks differ: rank 0 has {}, rank {} has {}", first, r, other), site);
  }
}

// ---- the world

ProcessGroup& init(InitOptions opt) {
  if (g_world) return *g_world;
  Site site(nullptr, 0);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (!launched_by_mpi()) {
      const char* ws = std::getenv("WORLD_SIZE");
      if (ws && std::atoi(ws) > 1)
        fail("dist::init",
             fmt::format("WORLD_SIZE={} is set but this process was not started by mpirun or srun: reel's process "
                         "groups come from MPI, so start the {} processes with `mpirun -np {} <program>` (or srun); "
                         "torchrun-style launches are not supported",
                         ws, ws, ws), site);
    }
    // OpenMPI's nonblocking all-reduce (libnbc) takes a binomial reduce + broadcast
    // whenever there are fewer than 4 ranks, whatever the size: 8.3 ms for 16 MiB on 2
    // ranks, where its ring takes 2.5 ms (docs/distributed.md, "Measured here"). Every
    // gradient bucket goes through it, so the ring is the default unless the user chose.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
    int provided = 0;
    // MULTIPLE: DistributedDataParallel's progress thread tests its all-reduces while the
    // program's thread may call MPI too (it serialises its own calls; an MPI that offers
    // less runs DistributedDataParallel without the thread)
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "dist::init", site);
    std::atexit(finalize_at_exit);
  }
  std::set_terminate(terminate_with_abort);
  auto s = std::make_unique<GroupState>();
  s->opt = opt;
  int level = 0;
  MPI_Query_thread(&level);
  s->thread_level = level;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &s->comm), "dist::init", site);
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &s->async_comm), "dist::init", site);
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &s->fault_comm), "dist::init", site);
  s->timeout_s = opt.timeout_s;
  if (!(s->timeout_s > 0)) {
    s->timeout_s = 600;
    if (const char* v = std::getenv("REEL_DIST_TIMEOUT")) {
      char* end = nullptr;
      double t = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(t > 0))
        fail("dist::init", fmt::format("REEL_DIST_TIMEOUT must be a number of seconds > 0, got '{}'", v), site);
      s->timeout_s = t;
    }
  } 
  MPI_Comm_rank(s->comm, &s->rank);
  MPI_Comm_size(s->comm, &s->size);
  MPI_Comm local;
  check_mpi(MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, s->rank, MPI_INFO_NULL, &local), "dist::init", site);
  MPI_Comm_rank(local, &s->local_rank);
  MPI_Comm_size(local, &s->local_size);
  MPI_Comm_free(&local);
  g_world = new ProcessGroup(std::move(s));  // lives until exit: collectives may run in destructors
  return *g_world;
}

bool is_initialized() { return g_world != nullptr; }

ProcessGroup& world() {
  if (!g_world) fail("dist::world", "the process group is not made yet: call dist::init() first", Site(nullptr, 0));
  return *g_world;
}

void abort(const std::string& message, int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int rank = g_world ? g_world->rank() : 0;
  std::fprintf(stderr, "reel::dist: rank %d: %s; ending the job\n", rank, message.c_str());
  std::fflush(stderr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized || g_finalized) return;
  g_finalized = true;
  if (g_world) {
    GroupState& g = g_world->state();
    nccl::destroy(g);
    MPI_Comm_free(&g.comm);
    MPI_Comm_free(&g.async_comm);
    MPI_Comm_free(&g.fault_comm);
  }
  MPI_Finalize();
}

void save_on_rank0(ProcessGroup& pg, const std::function<void()>& write, Site site) {
  GroupState& g = state_of(pg);
  std::string error;
  if (pg.rank() == 0) {
    try {
      write();
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "an exception without a message";
    }
  }
  int len = int(error.size());
  uint64_t seq = ++g.seq;
  MPI_Request req;
  check_mpi(MPI_Ibcast(&len, 1, MPI_INT, 0, g.comm, &req), "save_on_rank0", site);
  wait_request(g, req, "save_on_rank0", "rank 0's word that it wrote", seq);
  error.resize(size_t(len));
  if (len > 0) {
    check_mpi(MPI_Ibcast(error.data(), len, MPI_CHAR, 0, g.comm, &req), "save_on_rank0", site);
    wait_request(g, req, "save_on_rank0", "rank 0's error", seq);
  }
  if (len > 0) fail("save_on_rank0", fmt::format("rank 0 failed to write: {}", error), site);
}

}  // namespace reel::dist
