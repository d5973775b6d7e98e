// DistributedDataParallel's buckets summed in shared memory, for ranks on one host.
//
// Why: on one host MPI's ring all-reduce moves each bucket through process_vm_readv into
// a receive buffer, sums it there, and copies the peer's sums back: about 3.5 passes over
// the bucket per rank, on the same cores that run backward (W13, W4's 13.8 MB of
// gradients on 2 ranks: 3.3-4.7 ms of each 113 ms step, profiled). Here every rank's
// bucket already lives in one segment that all ranks map, so rank r reads its 1/W share
// of every rank's copy, sums it, and writes the sum into every copy: 2 passes over the
// bucket per rank, and no receive buffers. Each copy holds its rank's gradients as they
// are (a plain copy, about half the time of dividing while copying, which an out-of-place
// multiply writing 13 MB at one thread took: 2.1 against 1.0 ms); the share's sum
// divides by W as it reads them.
//
// Layout: one region per rank, [flags page][bucket 0][bucket 1]..., each page-aligned.
// A rank writes only its own flags: ready[k] (its bucket k holds step n's values) and
// done[k] (its share of bucket k is summed into every copy), each the step's number n.
// Rank r sums its share of bucket k once every ready[k] >= n; bucket k is complete once
// every done[k] >= n. A rank writes its bucket again (the next backward) only after it
// saw every done[k] >= n, so no rank still reads it; the release stores and acquire loads
// of the flags order the buckets' bytes.
//
// Bits: the same as OpenMPI's ring all-reduce (libnbc, which dist::init makes the default),
// so a job's weights do not depend on whether its ranks share a host: the ring cuts a
// bucket of n into W segments (the first n % W one element longer) and sums segment e
// around the ring starting at rank e - 1: ((g[e-1] + g[e]) + g[e+1]) + ... + g[e-2].
// Rank e sums segment e in that order here. (Checked against OpenMPI 4.1 for 2 to 6 ranks
// in test/dist/test_ddp.cpp.)
#include "internal/shared_buckets.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "../tensor/storage.h"
#include "internal/state.h"

namespace reel::dist {
namespace {

constexpr size_t kPage = 4096;
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

void unmap(void* data, size_t nbytes) { ::munmap(data, std::max<size_t>(nbytes, 1)); }

// flags of rank q: ready[k] at index k, done[k] at index buckets + k
uint64_t* flags_of(char* base, size_t region, int q) { return reinterpret_cast<uint64_t*>(base + size_t(q) * region); }

uint64_t load(const uint64_t* p) { return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(p)).load(std::memory_order_acquire); }
void store(uint64_t* p, uint64_t v) { std::atomic_ref<uint64_t>(*p).store(v, std::memory_order_release); }

// every copies[q][lo, hi) = the sum of them all, each element multiplied by `scale` as it is
// read, in the order given: ((c0 s + c1 s) + c2 s) + ..., the bits of dividing every copy
// first and summing after (MPI's path: DistributedDataParallel's fill_slot, then the
// ring), with no pass of its own for the division. (This file is built with
// -ffp-contract=off: an FMA would round c0 s + c1 s once where the division rounds twice.)
// Memory bound (reads W shares, writes W), in L1-sized blocks.
template <typename T>
void sum_into_all(const std::vector<char*>& copies, int64_t lo, int64_t hi, T scale) {
  constexpr int64_t kBlock = 2048;
  alignas(64) T acc[kBlock];
  const size_t w = copies.size();
  for (int64_t b = lo; b < hi; b += kBlock) {
    const int64_t n = std::min(kBlock, hi - b);
    const T* first = reinterpret_cast<const T*>(copies[0]) + b;
    const T* second = reinterpret_cast<const T*>(copies[1]) + b;
    for (int64_t i = 0; i < n; ++i) acc[i] = first[i] * scale + second[i] * scale;
    for (size_t q = 2; q < w; ++q) {
      const T* s = reinterpret_cast<const T*>(copies[q]) + b;
      for (int64_t i = 0; i < n; ++i) acc[i] += s[i] * scale;
    }
    for (size_t q = 0; q < w; ++q) std::memcpy(reinterpret_cast<T*>(copies[q]) + b, acc, size_t(n) * sizeof(T));
  }
}

}  // namespace

std::unique_ptr<SharedBuckets> SharedBuckets::make(ProcessGroup& pg, const std::vector<Spec>& specs,
                                                   std::string* why) {
  GroupState& g = pg.state();
  auto no = [&](std::string reason) -> std::unique_ptr<SharedBuckets> {
    if (why) *why = std::move(reason);
    return nullptr;
  };
  // every rank decides these alike (the same group, the same specs): no collective yet
  if (g.size < 2) return no("one rank");
  if (g.local_size != g.size) return no(fmt::format("{} of the {} ranks on this host", g.local_size, g.size));
  for (const Spec& s : specs)
    if (s.dtype != DType::f32 && s.dtype != DType::f64) return no(fmt::format("a bucket of {}", dtype_name(s.dtype)));
  std::unique_ptr<SharedBuckets> sb(new SharedBuckets());
  sb->pg_ = &pg;
  sb->rank_ = g.rank;
  sb->size_ = g.size;
  sb->specs_ = specs;
  size_t at = round_up(2 * specs.size() * sizeof(uint64_t), kPage);
  for (const Spec& s : specs) {
    sb->offsets_.push_back(at);
    at += round_up(std::max<size_t>(size_t(s.numel) * dtype_size(s.dtype), 1), kPage);
  }
  sb->region_ = at;
  sb->bytes_ = at * size_t(g.size);

  // rank 0 makes the segment (zeros, its pages reserved now: tmpfs would otherwise raise
  // SIGBUS at the first page past its room), the others open it by name, then rank 0
  // unlinks it: the name exists only during construction, the memory until the last unmap
  static int segments_made = 0;
  // rank 0's pid, its count of segments, and its clock (pids repeat across containers that
  // share a /dev/shm)
  Tensor info = zeros({3}, {.dtype = DType::i64});
  if (g.rank == 0) {
    info.data_ptr<int64_t>()[0] = int64_t(::getpid());
    info.data_ptr<int64_t>()[1] = int64_t(segments_made++);
    info.data_ptr<int64_t>()[2] = int64_t(std::chrono::steady_clock::now().time_since_epoch().count() & 0xffffffff);
  }
  pg.broadcast(info, 0);
  const int64_t* id = info.data_ptr<int64_t>();
  const std::string name = fmt::format("/reel-ddp-{}-{}-{:x}", id[0], id[1], id[2]);
  int fd = -1;
  Tensor outcome = zeros({2}, {.dtype = DType::i64});  // rank 0's failure (1: shm_open, 2: its room) and errno
  if (g.rank == 0) {
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    int64_t* m = outcome.data_ptr<int64_t>();
    if (fd < 0) m[0] = 1, m[1] = errno;
    else if (int rc = ::posix_fallocate(fd, 0, off_t(sb->bytes_)); rc != 0) m[0] = 2, m[1] = rc;
  }
  pg.broadcast(outcome, 0);  // the others open it only once it has its size; every rank names rank 0's failure
  const int64_t stage = outcome.data_ptr<int64_t>()[0];
  const int code = int(outcome.data_ptr<int64_t>()[1]);
  std::string failed = stage == 1   ? fmt::format("shm_open on rank 0: {}", std::strerror(code))
                       : stage == 2 ? fmt::format("{:.1f} MiB in /dev/shm: {}", double(sb->bytes_) / (1 << 20),
                                                  std::strerror(code))
                                    : "";
  const bool made_ok = stage == 0;
  if (g.rank != 0 && made_ok) {
    fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) failed = fmt::format("shm_open: {}", std::strerror(errno));
  }
  if (failed.empty()) {
    void* p = ::mmap(nullptr, sb->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) failed = fmt::format("mmap: {}", std::strerror(errno));
    else sb->base_ = static_cast<char*>(p);
  }
  if (failed.empty()) {
    for (size_t k = 0; k < specs.size(); ++k) {
      const size_t nbytes = size_t(specs[k].numel) * dtype_size(specs[k].dtype);
      void* p = ::mmap(nullptr, std::max<size_t>(nbytes, 1), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                       off_t(size_t(g.rank) * sb->region_ + sb->offsets_[k]));
      if (p == MAP_FAILED) {
        failed = fmt::format("mmap: {}", std::strerror(errno));
        break;
      }
      auto impl = make_ref<TensorImpl>();
      impl->shape = Dims{specs[k].numel};
      impl->strides = contiguous_strides(impl->shape);
      impl->dtype = specs[k].dtype;
      impl->storage = make_ref<Storage>(p, nbytes, kCPU, &unmap);
      sb->slabs_.push_back(Tensor(std::move(impl)));
    }
  }
  if (fd >= 0) ::close(fd);
  Tensor all_ok = scalar_tensor(double(failed.empty() ? 1 : 0), {.dtype = DType::i64});
  pg.all_reduce(all_ok, ReduceOp::min);  // every rank has mapped it (or given up)
  if (g.rank == 0 && fd >= 0) ::shm_unlink(name.c_str());
  if (all_ok.item<int64_t>() != 1) {
    // (the destructor unmaps what this rank mapped)
    return no(failed.empty() ? "another rank could not map the shared segment" : failed);
  }
  sb->round_.assign(specs.size(), 0);
  sb->seq_.assign(specs.size(), 0);
  sb->what_.assign(specs.size(), {});
  sb->pending_.assign(specs.size(), false);
  sb->finished_.assign(specs.size(), true);
  return sb;
}

SharedBuckets::~SharedBuckets() {
  // No wait: a peer still summing reads this rank's bucket through its own mapping, which
  // outlives this one; the slabs' views keep their own mappings.
  if (base_) ::munmap(base_, bytes_);
}

bool SharedBuckets::all_at_least(size_t flag_index, uint64_t round) const {
  for (int q = 0; q < size_; ++q)
    if (load(flags_of(base_, region_, q) + flag_index) < round) return false;
  return true;
}

void SharedBuckets::start(size_t k, const std::string& what) {
  GroupState& g = pg_->state();
  seq_[k] = ++g.seq;
  g.stats.collectives++;
  g.stats.all_reduce_bytes += uint64_t(specs_[k].numel) * dtype_size(specs_[k].dtype);
  what_[k] = what;
  round_[k]++;
  pending_[k] = true;
  finished_[k] = false;
  store(flags_of(base_, region_, rank_) + k, round_[k]);
}

void SharedBuckets::reduce_share(size_t k) {
  const int64_t n = specs_[k].numel, w = size_, r = rank_;
  const int64_t lo = r * (n / w) + std::min(r, n % w), hi = lo + n / w + (r < n % w ? 1 : 0);
  std::vector<char*> copies;  // the ring's order for segment r: ranks r - 1, r, r + 1, ...
  for (int64_t i = 0; i < w; ++i) copies.push_back(base_ + size_t((r - 1 + w + i) % w) * region_ + offsets_[k]);
  // the scale as fill_slot's mul_scalar makes it: T(1.0 / W)
  if (specs_[k].dtype == DType::f64) sum_into_all<double>(copies, lo, hi, 1.0 / double(w));
  else sum_into_all<float>(copies, lo, hi, float(1.0 / double(w)));
  pending_[k] = false;
  store(flags_of(base_, region_, rank_) + specs_.size() + k, round_[k]);
}

void SharedBuckets::advance() {
  for (size_t k = 0; k < specs_.size(); ++k)
    if (pending_[k] && all_at_least(k, round_[k])) reduce_share(k);
}

void SharedBuckets::wait(size_t k) {
  if (finished_[k]) return;
  auto t0 = std::chrono::steady_clock::now();
  const double limit = pg_->state().timeout_s;
  for (uint64_t spin = 0;; ++spin) {
    advance();
    if (!pending_[k] && all_at_least(specs_.size() + k, round_[k])) break;
    // a rank per core waits a few microseconds; where ranks share cores, yield the core
    if (spin > 64) std::this_thread::yield();
    if (spin % 1024 == 1023 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit)
      report_timeout(pg_->state(), "all_reduce_async", what_[k], seq_[k]);
  }
  finished_[k] = true;
}

}  // namespace reel::dist
