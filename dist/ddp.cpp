// DistributedDataParallel: buckets of gradients all-reduced from backward's hooks
// (see ddp.h for the scheme).
#include "ddp.h"

#include <fmt/format.h>

#include <chrono>

#include "../autograd/grad_buffer.h"
#include "../autograd/grad_mode.h"
#include "../autograd/hooks.h"
#include "../debug/debug.h"
#include "../tensor/backend.h"
#include "internal/shared_buckets.h"

namespace reel::dist {

namespace {
// slot = g / world, in one pass over g (PyTorch's reducer divides while it copies into
// the bucket): the bucket then all-reduces averages, and backward's end has no pass of
// its own to make. In a power-of-two world the bits are those of dividing the sum (a
// power of two scales every rounding alike; only subnormal gradients could differ).
// A gradient already in its slot (accumulated in place there) is divided where it is; one
// of another dtype or device (set_grad allows it) is copied over first, as before.
// Buckets in shared memory take g undivided (`divide` false): their sum divides as it
// reads each rank's copy (dist/shared_buckets.cpp), with the same bits, and a plain copy
// is the cheaper pass.
void fill_slot(const Tensor& slot, const Tensor& g, int world, bool divide) {
  Tensor out = slot.reshape(g.shape());
  Backend& be = backend_for(slot.device());
  const bool same = g.dtype() == slot.dtype() && g.device() == slot.device();
  if (!divide) {
    if (!(same && g.data_ptr() == out.data_ptr() && g.strides() == out.strides())) out.copy_(g);
  } else if (same && (g.device().is_cpu() || g.is_contiguous())) {  // (a gradient in its slot is contiguous)
    be.unary(UnaryOp::mul_scalar, out, g, 1.0 / world);
  } else {
    out.copy_(g);
    be.unary(UnaryOp::mul_scalar, out, out, 1.0 / world);
  }
}
}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& module, ProcessGroup& pg,
                                                 DistributedDataParallelOptions opt, Site site)
    : module_(module), pg_(pg), opt_(opt) {
  const char* op = "DistributedDataParallel";
  if (!(opt.bucket_cap_mb > 0)) fail(op, fmt::format("bucket_cap_mb must be positive, got {}", opt.bucket_cap_mb), site);
  nn::NamedTensors named = module.named_parameters();
  // every rank must wrap the same model: one layout check, then no per-bucket checks
  std::string layout;
  for (auto& [name, t] : named) layout += fmt::format("{} {} {}; ", name, t.shape().str(), dtype_name(t.dtype()));
  for (auto& [name, t] : module.named_buffers()) layout += fmt::format("{} {}; ", name, t.shape().str());
  // the buckets in shared memory or not: the ranks must agree (making the segment is a collective)
  bool all_cpu = true;
  for (auto& [name, t] : named) all_cpu = all_cpu && t.device().is_cpu();
  const char* env = std::getenv("REEL_DDP_SHARED_MEMORY");
  const bool want_shared = opt.shared_memory && all_cpu && !(env && std::string(env) == "0");
  pg.check_same(op, fmt::format("the model [{}], buckets in shared memory where they can be: {}", layout,
                                want_shared ? "yes" : "no (.shared_memory, REEL_DDP_SHARED_MEMORY or a CUDA parameter)"),
                site);

  {
    NoGradGuard no_grad;  // parameters are leaves that require grad: written in place
    for (auto& [name, t] : named) pg.broadcast(t, 0, site);
    for (Tensor& b : module.buffers()) pg.broadcast(b, 0, site);
  }

  // buckets in reverse registration order, one dtype and device each
  for (auto it = named.rbegin(); it != named.rend(); ++it)
    if (it->second.requires_grad()) params_.push_back({it->second, it->first});
  // PyTorch's rule: a bucket closes once it holds at least its cap (so one large
  // gradient makes a bucket of its own size), or at a change of dtype or device
  if (!(opt.first_bucket_mb > 0))
    fail(op, fmt::format("first_bucket_mb must be positive, got {}", opt.first_bucket_mb), site);
  std::vector<std::vector<size_t>> groups;
  double bytes = 0;
  bool open = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& t = params_[i].t;
    if (open) {
      const Tensor& first = params_[groups.back().front()].t;
      open = first.dtype() == t.dtype() && first.device() == t.device();
    }
    if (!open) {
      groups.emplace_back();
      bytes = 0;
      open = true;
    }
    groups.back().push_back(i);
    bytes += double(t.numel()) * double(t.element_size());
    double cap = (groups.size() == 1 ? opt.first_bucket_mb : opt.bucket_cap_mb) * 1024 * 1024;
    if (bytes >= cap) open = false;
  }
  std::vector<SharedBuckets::Spec> specs;  // each bucket's size and dtype
  for (size_t k = 0; k < groups.size(); ++k) {
    int64_t n = 0;
    for (size_t i : groups[k]) {
      params_[i].bucket = k;
      params_[i].offset = n;
      n += params_[i].t.numel();
    }
    specs.push_back({.numel = n, .dtype = params_[groups[k].front()].t.dtype()});
  }
  std::string why;
  // a collective: every rank decides alike (checked above)
  if (want_shared) shared_ = SharedBuckets::make(pg, specs, &why);
  stats_.shared_memory = shared_ != nullptr;
  stats_.transport = shared_ ? "shared memory" : !all_cpu ? "NCCL" : why.empty() ? "MPI" : "MPI (" + why + ")";
  for (size_t k = 0; k < groups.size(); ++k) {
    Bucket b;
    const Tensor& first = params_[groups[k].front()].t;
    b.flat = shared_ ? shared_->slab(k) : zeros({specs[k].numel}, {.dtype = first.dtype(), .device = first.device()});
    b.params = groups[k];
    b.pending = groups[k].size();
    stats_.bytes += uint64_t(specs[k].numel) * first.element_size();
    buckets_.push_back(std::move(b));
  }
  stats_.buckets = int64_t(buckets_.size());
  for (size_t k = 0; k < buckets_.size(); ++k)
    buckets_[k].label = fmt::format("DistributedDataParallel's bucket {} of {} ({:.2f} MiB, {} parameters)", k + 1,
                                    buckets_.size(), double(buckets_[k].flat.numel()) * double(buckets_[k].flat.element_size()) / (1024.0 * 1024.0),
                                    buckets_[k].params.size());

  // backward writes a parameter's first gradient straight into its slot where its rule can
  // (linear's weight: autograd/grad_buffer.h); on_grad then finds it there and copies nothing
  for (Param& p : params_)
    autograd::set_grad_buffer(p.t, buckets_[p.bucket].flat.narrow(0, p.offset, p.t.numel()).reshape(p.t.shape()));
  for (size_t i = 0; i < params_.size(); ++i)
    hook_ids_.push_back(autograd::add_post_accumulate_grad_hook(params_[i].t, [this, i](const Tensor&) { on_grad(i); }));
  hook_ids_.push_back(autograd::add_backward_end_hook([this] { finish(); }));
  if (opt.progress == Progress::thread && pg.threads_may_call()) progress_thread_ = std::thread([this] { progress_loop(); });
}

void DistributedDataParallel::progress_loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || polling_; });
    if (stop_) return;
    try {
      progress();
    } catch (const std::exception& e) {
      abort(fmt::format("DistributedDataParallel: an all-reduce failed: {}", e.what()));
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(opt_.progress_interval_us));
    lock.lock();
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (uint64_t id : hook_ids_) autograd::remove_backward_hook(id);
  for (Param& p : params_) {  // (unless another DistributedDataParallel of this model has set its own since)
    Tensor mine = buckets_[p.bucket].flat.narrow(0, p.offset, p.t.numel()), now = autograd::grad_buffer(p.t);
    if (now.defined() && now.data_ptr() == mine.data_ptr()) autograd::set_grad_buffer(p.t, Tensor());
  }
  if (progress_thread_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    progress_thread_.join();
  }
  for (Bucket& b : buckets_) {
    try {
      b.work.wait();
    } catch (const std::exception&) {
      // a failed all-reduce already reported its error; a destructor must not throw
    }
  }
}

std::vector<int64_t> DistributedDataParallel::bucket_numels() const {
  std::vector<int64_t> n;
  for (const Bucket& b : buckets_) n.push_back(b.flat.numel());
  return n;
}

Tensor DistributedDataParallel::operator()(const Tensor& x, Site site) {
  if (opt_.broadcast_buffers && module_.is_training()) {
    NoGradGuard no_grad;
    for (Tensor& b : module_.buffers()) pg_.broadcast(b, 0, site);
  }
  if (grad_enabled() && sync_) armed_ = true;
  return module_(x, site);
}

void DistributedDataParallel::on_grad(size_t i) {
  if (!armed_) return;
  touched_ = true;
  Param& p = params_[i];
  if (p.ready) return;
  Bucket& b = buckets_[p.bucket];
  {
    NoGradGuard no_grad;  // the bucket is not in flight before all its parameters are ready
    debug::Range r("ddp: gradient into bucket");  // (in the profiler's table; a branch otherwise)
    Tensor slot = b.flat.narrow(0, p.offset, p.t.numel());
    // a gradient kept from the last step (no zero_grad, or zero_grad(false)) is that
    // step's view of this slot, accumulated in place: already there, divided in place
    fill_slot(slot, p.t.grad(), pg_.size(), !shared_);
  }
  std::unique_lock lock(mu_, std::defer_lock);
  if (progress_thread_.joinable()) lock.lock();
  mark_ready(i);
  if (!progress_thread_.joinable()) progress();
}

void DistributedDataParallel::mark_ready(size_t i) {
  Param& p = params_[i];
  p.ready = true;
  if (--buckets_[p.bucket].pending == 0) launch_ready();
}

// Starts the full buckets in bucket order: every rank issues the same sequence.
void DistributedDataParallel::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(buckets_[next_launch_++]);
}

void DistributedDataParallel::launch(Bucket& b) {
  b.launched = true;
  if (shared_) {
    shared_->start(size_t(&b - buckets_.data()), b.label);  // the progress below sums this rank's share
  } else if (b.flat.device().is_cuda()) {
    pg_.all_reduce(b.flat, ReduceOp::sum);  // NCCL: queued on its stream, the host does not wait
  } else {
    // the slots were divided on backward's thread (fill_slot): the progress thread
    // runs no ops (each would start an OpenMP pool of its own)
    b.work = pg_.all_reduce_async(b.flat, ReduceOp::sum, b.label);
  }
  if (!b.flat.device().is_cuda() && progress_thread_.joinable() && !polling_) {
    polling_ = true;
    cv_.notify_one();
  }
}

// OpenMPI advances a nonblocking collective only inside MPI calls: each hook gives the
// ones in flight a turn.
void DistributedDataParallel::progress() {
  debug::Range r("ddp: all-reduce progress");
  if (shared_) return shared_->advance();
  for (size_t k = 0; k < next_launch_; ++k)
    if (buckets_[k].work.defined()) buckets_[k].work.test();
}

void DistributedDataParallel::finish() {
  if (!armed_ || !touched_) return;  // a backward that did not come through this model
  std::unique_lock lock(mu_, std::defer_lock);
  if (progress_thread_.joinable()) lock.lock();  // the progress thread waits from here to reset()
  std::vector<std::string> unused;
  for (auto it = params_.rbegin(); it != params_.rend(); ++it)  // in registration order
    if (!it->ready) unused.push_back(it->name);
  if (!unused.empty() && !opt_.find_unused_parameters) {
    std::string names;
    for (auto& n : unused) names += (names.empty() ? "" : ", ") + n;
    reset();
    fail("DistributedDataParallel",
         fmt::format("{} parameter(s) got no gradient in this backward: {}. Every rank must all-reduce every "
                     "bucket: make them take part in the loss, set requires_grad false on them, or pass "
                     "{{.find_unused_parameters = true}}",
                     unused.size(), names),
         Site(nullptr, 0));
  }
  stats_.launched_in_backward = int64_t(next_launch_);
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      Param& p = params_[i];
      if (p.ready) continue;
      Tensor slot = buckets_[p.bucket].flat.narrow(0, p.offset, p.t.numel());
      if (p.t.grad().defined()) fill_slot(slot, p.t.grad(), pg_.size(), !shared_);  // accumulated under no_sync
      else slot.zero_();
      mark_ready(i);
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  {
    debug::Range r("ddp: all-reduce wait");
    for (size_t k = 0; k < buckets_.size(); ++k)
      if (shared_) shared_->wait(k);
      else buckets_[k].work.wait();
  }
  stats_.wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  NoGradGuard no_grad;
  // Each gradient becomes a view of its bucket (PyTorch's gradient_as_bucket_view): no copy
  // back, one pass over the gradients fewer a step. The next backward fills the bucket
  // again only after every gradient it overwrites has been recomputed (or accumulated in
  // place into this view), so the optimizer step in between reads the averages.
  for (Param& p : params_) p.t.set_grad(buckets_[p.bucket].flat.narrow(0, p.offset, p.t.numel()).reshape(p.t.shape()));
  reset();
}

void DistributedDataParallel::reset() {
  for (Param& p : params_) p.ready = false;
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.launched = false;
    b.work = Work();
  }
  next_launch_ = 0;
  polling_ = false;
  armed_ = false;
  touched_ = false;
}

}  // namespace reel::dist
