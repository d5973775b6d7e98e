// data/: IDX and CIFAR-10 readers (synthetic files, gzip and plain, corrupt and
// truncated), the real Fashion-MNIST when installed, Dataset/DataLoader order,
// batching and prefetch, and the image transforms.
#include <catch2/catch.hpp>
#include <reel/cuda/cuda.h>
#include <reel/data/cifar.h>
#include <reel/data/dataloader.h>
#include <reel/data/dataset.h>
#include <reel/data/mnist.h>
#include <reel/data/transforms.h>
#include <reel/reel.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

using namespace reel;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

fs::path temp_dir() {
  static std::atomic<int> counter{0};
  fs::path d = fs::temp_directory_path() /
               ("reel_test_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::create_directories(d);
  return d;
}

void write_file(const fs::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

void put32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}

// An IDX file: magic, sizes, then `payload`.
Bytes idx(uint32_t magic, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b;
  put32(b, magic);
  for (uint32_t d : dims) put32(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

uint32_t crc32(const Bytes& b) {
  uint32_t c = 0xffffffffu;
  for (uint8_t x : b) {
    c ^= x;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// A gzip member holding `b` in one stored (uncompressed) deflate block: written by
// hand so the test checks the reader against an independent writer.
Bytes gzip_stored(const Bytes& b) {
  Bytes g = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  g.push_back(1);  // final block, stored
  uint16_t len = uint16_t(b.size()), nlen = uint16_t(~len);
  g.insert(g.end(), {uint8_t(len), uint8_t(len >> 8), uint8_t(nlen), uint8_t(nlen >> 8)});
  g.insert(g.end(), b.begin(), b.end());
  uint32_t crc = crc32(b), size = uint32_t(b.size());
  for (int s = 0; s < 32; s += 8) g.push_back(uint8_t(crc >> s));
  for (int s = 0; s < 32; s += 8) g.push_back(uint8_t(size >> s));
  return g;
}

// Three 2x3 images with pixel value 10 * image + position.
Bytes tiny_images() {
  Bytes px;
  for (int i = 0; i < 3; ++i)
    for (int p = 0; p < 6; ++p) px.push_back(uint8_t(10 * i + p));
  return idx(0x00000803, {3, 2, 3}, px);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("IDX images and labels parse, plain and gzip", "[data]") {
  fs::path dir = temp_dir();
  write_file(dir / "img", tiny_images());
  write_file(dir / "img.gz", gzip_stored(tiny_images()));
  write_file(dir / "lab.gz", gzip_stored(idx(0x00000801, {3}, {7, 0, 9})));
  for (const char* name : {"img", "img.gz"}) {
    Tensor u8 = data::read_mnist_images((dir / name).string(), {.dtype = DType::u8});
    CHECK(u8.shape() == Dims{3, 1, 2, 3});
    CHECK(u8.dtype() == DType::u8);
    CHECK(u8.to_vector<int>()[7] == 11);
    Tensor f = data::read_mnist_images((dir / name).string());
    CHECK(f.dtype() == DType::f32);
    CHECK(f.to_vector<float>()[17] == Approx(25.0 / 255.0));
    Tensor raw = data::read_mnist_images((dir / name).string(), {.scale = false});
    CHECK(raw.to_vector<float>()[17] == 25.0f);
  }
  Tensor labels = data::read_mnist_labels((dir / "lab.gz").string());
  CHECK(labels.dtype() == DType::i64);
  CHECK(labels.to_vector<int64_t>() == std::vector<int64_t>{7, 0, 9});
  fs::remove_all(dir);
}

TEST_CASE("IDX wider element types decode big-endian", "[data]") {
  Bytes i16 = idx(0x00000B01, {2}, {0xff, 0xfe, 0x01, 0x00});
  CHECK(data::parse_idx(i16, "i16").to_vector<int32_t>() == std::vector<int32_t>{-2, 256});
  Bytes f32 = idx(0x00000D02, {1, 1}, {0x3f, 0xc0, 0x00, 0x00});  // 1.5
  Tensor t = data::parse_idx(f32, "f32");
  CHECK(t.shape() == Dims{1, 1});
  CHECK(t.item<float>() == 1.5f);
}

TEST_CASE("corrupt and truncated IDX files give errors naming the file", "[data]") {
  fs::path dir = temp_dir();
  Bytes good = tiny_images();
  Bytes cut(good.begin(), good.end() - 5);
  write_file(dir / "cut", cut);
  std::string p = (dir / "cut").string();
  std::string e = error_of([&] { data::read_mnist_images(p); });
  CHECK_THAT(e, Catch::Contains("read_idx: " + p + ": truncated: header says 3x2x3 u8 values (18 bytes), "
                                "file has 13 bytes of data"));

  write_file(dir / "labels_as_images", idx(0x00000801, {3}, {1, 2, 3}));
  p = (dir / "labels_as_images").string();
  CHECK_THAT(error_of([&] { data::read_mnist_images(p); }),
             Catch::Contains(p + ": expected magic 0x00000803, got 0x00000801"));

  Bytes longer = good;
  longer.push_back(0);
  CHECK_THAT(error_of([&] { data::parse_idx(longer, "long.idx"); }), Catch::Contains("long.idx") &&
             Catch::Contains("1 bytes too many"));
  CHECK_THAT(error_of([&] { data::parse_idx(Bytes{0, 0}, "two"); }), Catch::Contains("two: 2 bytes is too short"));
  CHECK_THAT(error_of([&] { data::parse_idx(idx(0x00000703, {1, 1, 1}, {0}), "bad"); }),
             Catch::Contains("bad: 0x00000703 is not an IDX magic"));
  CHECK_THAT(error_of([&] { data::parse_idx(idx(0x00000800, {}, {}), "nodims"); }),
             Catch::Contains("nodims: magic 0x00000800 says 0 dims"));
  CHECK_THAT(error_of([&] { data::parse_idx(Bytes{0, 0, 8, 3, 0, 0}, "hdr"); }),
             Catch::Contains("hdr: truncated: the header needs 16 bytes"));
  // sizes whose product overflows 64 bits must still be caught as truncation
  CHECK_THAT(error_of([&] { data::parse_idx(idx(0x00000803, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {1}), "huge"); }),
             Catch::Contains("huge: truncated"));

  Bytes gz = gzip_stored(good);
  write_file(dir / "cut.gz", Bytes(gz.begin(), gz.end() - 12));
  p = (dir / "cut.gz").string();
  CHECK_THAT(error_of([&] { data::read_mnist_images(p); }), Catch::Contains("read_idx: " + p + ": cannot read"));
  gz[20] ^= 0xff;  // a payload byte: the gzip CRC no longer matches
  write_file(dir / "crc.gz", gz);
  p = (dir / "crc.gz").string();
  CHECK_THAT(error_of([&] { data::read_mnist_images(p); }), Catch::Contains("read_idx: " + p + ": cannot read"));
  p = (dir / "missing").string();
  CHECK_THAT(error_of([&] { data::read_mnist_labels(p); }), Catch::Contains("read_idx: " + p + ": cannot open"));
  CHECK_THAT(error_of([&] { data::load_mnist(dir.string(), data::Split::test); }),
             Catch::Contains("load_mnist: " + dir.string() + ": found neither t10k-images-idx3-ubyte"));
  fs::remove_all(dir);
}

TEST_CASE("load_mnist reads the installed Fashion-MNIST", "[data]") {
  const char* dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(fs::path(dir) / "t10k-labels-idx1-ubyte.gz")) {
    WARN("Fashion-MNIST is not installed at " << dir << " (Debian: dataset-fashion-mnist); skipped");
    return;
  }
  data::ImageSet train = data::load_mnist(dir, data::Split::train);
  CHECK(train.images.shape() == Dims{60000, 1, 28, 28});
  CHECK(train.labels.shape() == Dims{60000});
  std::vector<int64_t> first = train.labels.narrow(0, 0, 10).to_vector<int64_t>();
  CHECK(first == std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  CHECK(train.images[0].sum().item<float>() == Approx(76247.0 / 255.0));
  data::ImageSet test = data::load_mnist(dir, data::Split::test, {.dtype = DType::u8});
  CHECK(test.images.shape() == Dims{10000, 1, 28, 28});
  CHECK(test.labels.narrow(0, 0, 10).to_vector<int64_t>() == std::vector<int64_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7});
  CHECK(test.images[0].to(DType::i64).sum().item<int64_t>() == 33456);
}

namespace {

// data[i] = [i, 100 + i], target[i] = i
data::TensorDataset counting(int n) {
  std::vector<float> d;
  std::vector<int64_t> t;
  for (int i = 0; i < n; ++i) {
    d.insert(d.end(), {float(i), float(100 + i)});
    t.push_back(i);
  }
  return data::TensorDataset(from_vector(d, {n, 2}), from_vector(t));
}

// the targets of every batch of one epoch, in order
std::vector<std::vector<int64_t>> epoch_targets(data::DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& b : loader) out.push_back(b.target.to_vector<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("TensorDataset gathers batches and checks its input", "[data]") {
  data::TensorDataset ds = counting(5);
  CHECK(ds.size() == 5);
  std::vector<int64_t> idx{4, 1};
  data::Example b = ds.get_batch(idx);
  CHECK(b.data.shape() == Dims{2, 2});
  CHECK(b.data.to_vector<float>() == std::vector<float>{4, 104, 1, 101});
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{4, 1});
  CHECK(ds.get(3).data.to_vector<float>() == std::vector<float>{3, 103});
  std::vector<int64_t> bad{0, 5};
  CHECK_THAT(error_of([&] { ds.get_batch(bad); }), Catch::Contains("index 5 is out of range for 5 examples"));
  CHECK_THAT(error_of([&] { data::TensorDataset(zeros({3, 2}), zeros({4})); }),
             Catch::Contains("data has 3 examples ([3, 2]), targets has 4"));
}

TEST_CASE("the default get_batch stacks get(i)", "[data]") {
  struct Squares : data::Dataset {
    int64_t size() const override { return 4; }
    data::Example get(int64_t i) const override {
      return {full({2}, double(i * i)), scalar_tensor(double(i), {.dtype = DType::i64})};
    }
  } ds;
  std::vector<int64_t> idx{3, 0, 2};
  data::Example b = ds.get_batch(idx);
  CHECK(b.data.shape() == Dims{3, 2});
  CHECK(b.data.to_vector<float>() == std::vector<float>{9, 9, 0, 0, 4, 4});
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{3, 0, 2});
  CHECK_THAT(error_of([&] { data::collate({{zeros({2}), zeros({})}, {zeros({3}), zeros({})}}); }),
             Catch::Contains("collate: example 1 has data [3] f32, example 0 has [2] f32"));
}

TEST_CASE("DataLoader shuffles reproducibly from its seed", "[data]") {
  data::TensorDataset ds = counting(50);
  data::DataLoader a(ds, {.batch_size = 8, .shuffle = true, .seed = 7});
  data::DataLoader b(ds, {.batch_size = 8, .shuffle = true, .seed = 7});
  data::DataLoader c(ds, {.batch_size = 8, .shuffle = true, .seed = 8});
  auto a0 = epoch_targets(a), a1 = epoch_targets(a);
  CHECK(a.epoch() == 2);
  CHECK(a0 == epoch_targets(b));
  CHECK(a1 == epoch_targets(b));
  CHECK(a0 != a1);                  // a new permutation each epoch
  CHECK(a0 != epoch_targets(c));  // and another seed, another order
  std::vector<int64_t> all;
  for (auto& batch : a0) all.insert(all.end(), batch.begin(), batch.end());
  CHECK(all == a.order(0));
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expect(50);
  std::iota(expect.begin(), expect.end(), 0);
  CHECK(all == expect);  // every example exactly once

  data::DataLoader plain(ds, {.batch_size = 8});
  CHECK(plain.order(3) == expect);
}

TEST_CASE("DataLoader batch counts with and without drop_last", "[data]") {
  data::TensorDataset ds = counting(10);
  data::DataLoader keep(ds, {.batch_size = 3});
  data::DataLoader drop(ds, {.batch_size = 3, .drop_last = true});
  CHECK(keep.size() == 4);
  CHECK(drop.size() == 3);
  std::vector<int64_t> sizes;
  for (auto& b : keep) sizes.push_back(b.data.size(0));
  CHECK(sizes == std::vector<int64_t>{3, 3, 3, 1});
  sizes.clear();
  for (auto& b : drop) sizes.push_back(b.data.size(0));
  CHECK(sizes == std::vector<int64_t>{3, 3, 3});
  data::DataLoader exact(ds, {.batch_size = 5, .drop_last = true});
  CHECK(epoch_targets(exact).size() == 2);
  CHECK_THAT(error_of([&] { data::DataLoader(ds, {.batch_size = 0}); }),
             Catch::Contains("batch_size must be at least 1, got 0"));
}

TEST_CASE("DataLoader workers give the batches of workers = 0", "[data]") {
  data::TensorDataset ds = counting(103);
  auto transform = [](data::Example b, uint64_t seed) {
    b.data = b.data + double(seed % 1000);  // the per-batch seed shows in the values
    return b;
  };
  data::DataLoader serial(ds, {.batch_size = 10, .shuffle = true, .seed = 3, .transform = transform});
  data::DataLoader parallel(ds, {.batch_size = 10, .shuffle = true, .seed = 3, .workers = 3, .prefetch = 2,
                                 .transform = transform});
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::vector<float>> s, p;
    for (auto& b : serial) s.push_back(b.data.to_vector<float>());
    int64_t count = 0;
    for (auto it = parallel.begin(); it != parallel.end(); ++it, ++count) {
      CHECK(it.index() == count);
      p.push_back(it->data.to_vector<float>());
    }
    CHECK(s.size() == 11);
    CHECK(s == p);
  }
  // leaving an epoch early and starting the next must not hang or mix epochs
  for (auto& b : parallel) {
    (void)b;
    break;
  }
  CHECK(epoch_targets(parallel).size() == 11);
}

TEST_CASE("DataLoader shuffles from a Generator: each epoch a randperm drawn at begin()", "[data][random]") {
  data::TensorDataset ds = counting(30);
  Generator g(5);
  data::DataLoader a(ds, {.batch_size = 7, .shuffle = true, .generator = &g});
  auto a0 = epoch_targets(a), a1 = epoch_targets(a);
  Generator ref(5);
  for (const auto& epoch : {a0, a1}) {
    std::vector<int64_t> all;
    for (auto& batch : epoch) all.insert(all.end(), batch.begin(), batch.end());
    CHECK(all == randperm(30, ref).to_vector<int64_t>());
  }
  CHECK(g.get_state() == ref.get_state());
  CHECK_THAT(error_of([&] { a.order(0); }), Catch::Contains("with a generator"));
}

namespace {
// The batches (targets) a loader gives from where it stands to the end of epoch `to_epoch`.
std::vector<std::vector<int64_t>> targets_until(data::DataLoader& loader, int64_t to_epoch) {
  std::vector<std::vector<int64_t>> out;
  while (loader.epoch() <= to_epoch)
    for (auto& b : loader) out.push_back(b.target.to_vector<int64_t>());
  return out;
}
}  // namespace

TEST_CASE("DataLoader state resumes in the middle of an epoch with the same batches", "[data][checkpoint]") {
  data::TensorDataset ds = counting(45);  // 7 batches of 7, the last of 3
  for (int workers : {0, 2})
    for (bool with_generator : {false, true}) {
      INFO("workers " << workers << (with_generator ? ", generator" : ", seed"));
      Generator g1(8), g2(8);
      auto options = [&](Generator& g) {
        return data::DataLoaderOptions{.batch_size = 7, .shuffle = true, .seed = 3, .workers = workers,
                                       .generator = with_generator ? &g : nullptr};
      };
      data::DataLoader straight(ds, options(g1));
      auto all = targets_until(straight, 2);  // epochs 0, 1, 2
      REQUIRE(all.size() == 21);

      data::DataLoader first(ds, options(g2));
      CHECK(first.state() == data::DataLoaderState{});
      epoch_targets(first);  // epoch 0
      std::vector<std::vector<int64_t>> got = {};
      int64_t k = 0;
      for (auto& b : first) {  // 3 batches of epoch 1, then stop
        got.push_back(b.target.to_vector<int64_t>());
        if (++k == 3) break;
      }
      data::DataLoaderState s = first.state();
      CHECK(s.epoch == 1);
      CHECK(s.batch == 3);
      GeneratorState g_after = g2.get_state();

      // a new loader (a new process) with the generator's state restored continues
      // at batch 3 of epoch 1
      Generator g3(999);
      g3.set_state(g_after);
      data::DataLoader resumed(ds, options(g3));
      resumed.load_state(s);
      CHECK(resumed.state() == s);
      std::vector<std::vector<int64_t>> rest;
      int64_t index = 3;
      for (auto it = resumed.begin(); it != resumed.end(); ++it, ++index) {
        CHECK(it.index() == index);
        rest.push_back(it->target.to_vector<int64_t>());
      }
      CHECK(resumed.state() == data::DataLoaderState{.epoch = 2, .batch = 0});
      for (auto& b : targets_until(resumed, 2)) rest.push_back(b);
      std::vector<std::vector<int64_t>> expect(all.begin() + 10, all.end());
      CHECK(rest == expect);
      if (with_generator) CHECK(g3.get_state() == g1.get_state());
    }
  data::DataLoader loader(ds, {.batch_size = 7});
  loader.load_state({.epoch = 0, .batch = 9});
  CHECK_THAT(error_of([&] { loader.begin(); }), Catch::Contains("resumes epoch 0 at batch 9, but an epoch has 7 batches"));
}

TEST_CASE("DataLoader rethrows an error made in a worker at its batch", "[data]") {
  struct Faulty : data::Dataset {
    int64_t size() const override { return 20; }
    data::Example get(int64_t i) const override {
      if (i == 13) throw Error("Faulty::get: example 13 is unreadable");
      return {full({1}, double(i)), scalar_tensor(double(i), {.dtype = DType::i64})};
    }
  } ds;
  data::DataLoader loader(ds, {.batch_size = 4, .workers = 2});
  int reached = 0;
  std::string e = error_of([&] {
    for (auto& b : loader) {
      (void)b;
      ++reached;
    }
  });
  CHECK(e == "Faulty::get: example 13 is unreadable");
  CHECK(reached == 3);  // batches 0-2 came through; batch 3 holds example 13
}

TEST_CASE("DataLoader delivers batches to a GPU from pinned memory", "[data][cuda]") {
  data::TensorDataset ds = counting(20);
  std::vector<int64_t> idx{5, 2};
  data::Example pinned = ds.get_batch(idx, data::HostMemory::pinned);
  CHECK(pinned.data.to_vector<float>() == std::vector<float>{5, 105, 2, 102});
  CHECK(pinned.data.device().is_cpu());
  data::DataLoader gpu(ds, {.batch_size = 6, .shuffle = true, .seed = 2, .workers = 2, .device = Device::cuda()});
  if (!cuda::is_available()) {
    WARN("no CUDA device (" << cuda::unavailable_reason() << "): GPU delivery skipped");
    CHECK_THROWS_AS(gpu.begin(), Error);  // the worker's failed copy reaches the caller
    return;
  }
  CHECK(cuda::is_pinned(pinned.data));
  data::DataLoader cpu(ds, {.batch_size = 6, .shuffle = true, .seed = 2});
  std::vector<std::vector<float>> on_gpu, on_cpu;
  for (auto& b : gpu) {
    CHECK(b.data.device() == Device::cuda());
    CHECK(b.target.device() == Device::cuda());
    on_gpu.push_back(b.data.cpu().to_vector<float>());
  }
  for (auto& b : cpu) on_cpu.push_back(b.data.to_vector<float>());
  CHECK(on_gpu == on_cpu);
}

namespace {

// two CIFAR records: labels 3 and 9; pixel byte p of record r is (r + p) mod 256
Bytes cifar_records() {
  Bytes b;
  for (int r = 0; r < 2; ++r) {
    b.push_back(r ? 9 : 3);
    for (int p = 0; p < 3072; ++p) b.push_back(uint8_t((r + p) % 256));
  }
  return b;
}

}  // namespace

TEST_CASE("CIFAR-10 records parse; bad files give errors", "[data]") {
  Bytes b = cifar_records();
  data::ImageSet s = data::parse_cifar10(b, "mem", {.dtype = DType::u8});
  CHECK(s.images.shape() == Dims{2, 3, 32, 32});
  CHECK(s.labels.to_vector<int64_t>() == std::vector<int64_t>{3, 9});
  // record 1, channel 2 (blue), row 31, col 31: byte 3071 of its pixels
  CHECK(s.images[1][2][31][31].to(DType::i64).item<int64_t>() == (1 + 3071) % 256);
  CHECK(s.images[0][1][0][5].to(DType::i64).item<int64_t>() == (1024 + 5) % 256);

  fs::path dir = temp_dir();
  write_file(dir / "data_batch_1.bin", b);
  write_file(dir / "data_batch_2.bin", b);
  write_file(dir / "data_batch_3.bin", b);
  write_file(dir / "data_batch_4.bin", b);
  write_file(dir / "data_batch_5.bin.gz", gzip_stored(Bytes(b.begin(), b.begin() + 3073)));
  data::ImageSet train = data::load_cifar10(dir.string(), data::Split::train);
  CHECK(train.images.shape() == Dims{9, 3, 32, 32});
  CHECK(train.images.dtype() == DType::f32);
  CHECK(train.labels.to_vector<int64_t>() == std::vector<int64_t>{3, 9, 3, 9, 3, 9, 3, 9, 3});
  CHECK(train.images[8][0][0][1].item<float>() == Approx(1.0 / 255.0));

  Bytes cut(b.begin(), b.end() - 1);
  CHECK_THAT(error_of([&] { data::parse_cifar10(cut, "cut.bin"); }),
             Catch::Contains("parse_cifar10: cut.bin: 6145 bytes is not a whole number of 3073-byte records "
                             "(1 records and 3072 bytes over)"));
  Bytes bad = b;
  bad[3073] = 10;
  write_file(dir / "test_batch.bin", bad);
  std::string p = (dir / "test_batch.bin").string();
  CHECK_THAT(error_of([&] { data::load_cifar10(dir.string(), data::Split::test); }),
             Catch::Contains("read_cifar10: " + p + ": record 1 has label 10"));
  fs::remove_all(dir);
}

TEST_CASE("normalize, flips and random crops give the expected values", "[data]") {
  // two images, 2 channels, 2x3
  Tensor x = arange(0.0, 24.0).reshape({2, 2, 2, 3});
  Tensor n = data::normalize(x, {1.0, 2.0}, {2.0, 4.0});
  std::vector<float> v = n.to_vector<float>();
  CHECK(v[0] == Approx((0 - 1) / 2.0));
  CHECK(v[6] == Approx((6 - 2) / 4.0));
  CHECK(v[23] == Approx((23 - 2) / 4.0));
  CHECK_THAT(error_of([&] { data::normalize(x, {1, 2, 3}, {1}); }), Catch::Contains("mean has 3 values for 2 channels"));
  CHECK_THAT(error_of([&] { data::normalize(x, {0}, {0}); }), Catch::Contains("std[0] is 0"));

  Tensor f = data::horizontal_flip(x);
  CHECK(f.narrow(0, 0, 1).to_vector<float>() == std::vector<float>{2, 1, 0, 5, 4, 3, 8, 7, 6, 11, 10, 9});
  CHECK(data::random_horizontal_flip(x, 5, 1.0).to_vector<float>() == f.to_vector<float>());
  CHECK(data::random_horizontal_flip(x, 5, 0.0).to_vector<float>() == x.to_vector<float>());
  Tensor r = data::random_horizontal_flip(arange(0.0, 128.0).reshape({64, 1, 1, 2}), 9);
  std::vector<float> rv = r.to_vector<float>();
  int flipped = 0;
  for (int i = 0; i < 64; ++i) flipped += rv[size_t(2 * i)] > rv[size_t(2 * i + 1)];
  CHECK(flipped > 16);
  CHECK(flipped < 48);

  CHECK(data::random_crop(x, 0, 1).to_vector<float>() == x.to_vector<float>());
  // padding 1 on a 1x3x3 u8 image: the result is the image shifted by (dy, dx) in
  // [-1, 1]^2 with zeros shifted in; all 64 images must be one of the nine shifts
  std::vector<uint8_t> img{1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<uint8_t> rep;
  for (int i = 0; i < 64; ++i) rep.insert(rep.end(), img.begin(), img.end());
  Tensor imgs = from_vector(rep, {64, 1, 3, 3});
  Tensor c = data::random_crop(imgs, 1, 42);
  CHECK(c.dtype() == DType::u8);
  CHECK(c.to_vector<int>() == data::random_crop(imgs, 1, 42).to_vector<int>());
  std::vector<int> cv = c.to_vector<int>();
  std::set<int> shifts;
  for (int i = 0; i < 64; ++i) {
    int found = -1;
    for (int dy = -1; dy <= 1 && found < 0; ++dy)
      for (int dx = -1; dx <= 1 && found < 0; ++dx) {
        bool ok = true;
        for (int y = 0; y < 3; ++y)
          for (int xx = 0; xx < 3; ++xx) {
            int sy = y + dy, sx = xx + dx;
            int want = sy >= 0 && sy < 3 && sx >= 0 && sx < 3 ? img[size_t(sy * 3 + sx)] : 0;
            ok = ok && cv[size_t(i * 9 + y * 3 + xx)] == want;
          }
        if (ok) found = (dy + 1) * 3 + dx + 1;
      }
    CHECK(found >= 0);
    shifts.insert(found);
  }
  CHECK(shifts.size() >= 7);  // 64 draws over 9 shifts: all but a couple appear
}
