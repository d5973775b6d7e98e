// TensorBoard's event files. A file is a sequence of TFRecords:
//   uint64 length, uint32 masked_crc32c(length), bytes[length] data, uint32 masked_crc32c(data)
// (little-endian; CRC-32C, Castagnoli, masked as ((crc >> 15 | crc << 17) + 0xa282ead8)).
// Each record's data is an Event protocol buffer; the first one carries file_version
// "brain.Event:2", the others a Summary. The few messages used are encoded by hand
// below (field numbers from tensorboard/compat/proto: event.proto, summary.proto,
// tensor.proto, tensor_shape.proto); protobuf's wire format is stable by design, and
// this keeps libreel free of a protobuf dependency for a dozen fields.
#include "summary_writer.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "png.h"

namespace reel {

namespace {

// ---- protobuf wire format: (field << 3 | wire type) keys, varints, little-endian fixed
class Proto {
 public:
  Proto& varint(int field, uint64_t v) { key(field, 0); put_varint(v); return *this; }
  Proto& f64(int field, double v) { key(field, 1); put_le(&v, 8); return *this; }
  Proto& f32(int field, float v) { key(field, 5); put_le(&v, 4); return *this; }
  Proto& bytes(int field, const void* p, size_t n) {
    key(field, 2);
    put_varint(n);
    put_le(p, n);
    return *this;
  }
  Proto& bytes(int field, std::string_view s) { return bytes(field, s.data(), s.size()); }
  Proto& message(int field, const Proto& m) { return bytes(field, m.buf.data(), m.buf.size()); }
  Proto& packed(int field, const std::vector<double>& v) {
    key(field, 2);
    put_varint(v.size() * 8);
    for (double d : v) put_le(&d, 8);
    return *this;
  }
  std::vector<uint8_t> buf;

 private:
  void key(int field, int wire_type) { put_varint(uint64_t(field) << 3 | uint64_t(wire_type)); }
  void put_varint(uint64_t v) {
    for (; v >= 0x80; v >>= 7) buf.push_back(uint8_t(v | 0x80));
    buf.push_back(uint8_t(v));
  }
  // x86-64 and aarch64 Linux are little-endian. resize + memcpy, not insert: GCC 12's
  // -Warray-bounds misfires on vector::insert of a few bytes.
  void put_le(const void* p, size_t n) {
    size_t at = buf.size();
    buf.resize(at + n);
    if (n) std::memcpy(buf.data() + at, p, n);
  }
};

// Field numbers
namespace event { enum { wall_time = 1, step = 2, file_version = 3, summary = 5 }; }
namespace summary { enum { value = 1 }; }
namespace value { enum { tag = 1, simple_value = 2, image = 4, histo = 5, tensor = 8, metadata = 9 }; }
namespace image { enum { height = 1, width = 2, colorspace = 3, encoded = 4 }; }
namespace histo { enum { min = 1, max = 2, num = 3, sum = 4, sum_squares = 5, bucket_limit = 6, bucket = 7 }; }
namespace metadata { enum { plugin_data = 1 }; }
namespace plugin { enum { name = 1, content = 2 }; }
namespace tensor { enum { dtype = 1, shape = 2, string_val = 8 }; }
namespace shape { enum { dim = 2 }; }
namespace dim { enum { size = 1 }; }
constexpr int kDtString = 7;  // tensorflow.DataType.DT_STRING

// ---- CRC-32C (reflected polynomial 0x82f63b78), table-driven
uint32_t crc32c(const uint8_t* p, size_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc(const uint8_t* p, size_t n) {
  uint32_t c = crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::atomic<int> next_file_id{0};

}  // namespace

SummaryWriter::SummaryWriter(std::string logdir, SummaryWriterOptions options)
    : logdir_(std::move(logdir)), options_(std::move(options)) {
  std::error_code ec;
  std::filesystem::create_directories(logdir_, ec);
  if (ec) throw Error("SummaryWriter: cannot create the log folder " + logdir_ + ": " + ec.message());
  double t = now_seconds();
  char name[512];
  std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%d.%d%s", static_cast<long long>(t),
                host_name().c_str(), int(getpid()), next_file_id++, options_.filename_suffix.c_str());
  file_ = (std::filesystem::path(logdir_) / name).string();
  out_ = std::fopen(file_.c_str(), "wb");
  if (!out_) throw Error("SummaryWriter: cannot create " + file_ + ": " + std::strerror(errno));
  write_event(Proto().f64(event::wall_time, t).bytes(event::file_version, "brain.Event:2").buf);
  flush();
}

SummaryWriter::~SummaryWriter() {
  try {
    close();
  } catch (const Error&) {  // a destructor must not throw; close() explicitly to see the error
  }
}

void SummaryWriter::write_event(const std::vector<uint8_t>& data) {
  if (!out_) throw Error("SummaryWriter: " + logdir_ + " is closed");
  uint8_t head[12];
  uint64_t n = data.size();
  std::memcpy(head, &n, 8);
  uint32_t c = masked_crc(head, 8);
  std::memcpy(head + 8, &c, 4);
  uint32_t cd = masked_crc(data.data(), data.size());
  if (std::fwrite(head, 1, 12, out_) != 12 || std::fwrite(data.data(), 1, data.size(), out_) != data.size() ||
      std::fwrite(&cd, 1, 4, out_) != 4)
    throw Error("SummaryWriter: cannot write " + file_ + ": " + std::strerror(errno));
}

void SummaryWriter::write_summary(const std::vector<uint8_t>& value, int64_t step) {
  Proto s;
  s.bytes(summary::value, value.data(), value.size());
  Proto e;
  e.f64(event::wall_time, now_seconds()).varint(event::step, uint64_t(step)).message(event::summary, s);
  write_event(e.buf);
  maybe_flush();
}

void SummaryWriter::maybe_flush() {
  if (now_seconds() - last_flush_ >= options_.flush_secs) flush();
}

void SummaryWriter::flush() {
  if (out_ && std::fflush(out_) != 0)
    throw Error("SummaryWriter: cannot write " + file_ + ": " + std::strerror(errno));
  for (auto& [key, child] : children_) child->flush();
  last_flush_ = now_seconds();
}

void SummaryWriter::close() {
  for (auto& [key, child] : children_) child->close();
  if (!out_) return;
  int rc = std::fclose(out_);
  out_ = nullptr;
  if (rc != 0) throw Error("SummaryWriter: cannot write " + file_ + ": " + std::strerror(errno));
}

void SummaryWriter::add_scalar(std::string_view tag, double v, int64_t step) {
  write_summary(Proto().bytes(value::tag, tag).f32(value::simple_value, float(v)).buf, step);
}

void SummaryWriter::add_scalars(std::string_view main_tag, const std::vector<std::pair<std::string, double>>& values,
                                int64_t step) {
  if (!out_) throw Error("SummaryWriter: " + logdir_ + " is closed");
  std::string base(main_tag);
  for (char& c : base)
    if (c == '/') c = '_';
  for (const auto& [key, v] : values) {
    std::string folder = base + "_" + key;  // one writer per (main tag, key): "loss_train"
    auto& child = children_[folder];
    if (!child) child = std::make_unique<SummaryWriter>((std::filesystem::path(logdir_) / folder).string(), options_);
    child->add_scalar(main_tag, v, step);
  }
}

void SummaryWriter::add_histogram(std::string_view tag, const Tensor& values, int64_t step, int bins) {
  std::string op = "add_histogram(" + std::string(tag) + ")";
  if (!values.defined() || values.numel() == 0) throw Error(op + ": expected a tensor with values, got none");
  if (bins < 1) throw Error(op + ": expected at least 1 bin, got " + std::to_string(bins));
  std::vector<double> v = values.detach().to_vector<double>();
  double lo = v[0], hi = v[0], sum = 0, sum_sq = 0;
  for (double x : v) {
    if (!std::isfinite(x)) throw Error(op + ": expected finite values, got " + std::to_string(x));
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
    sum_sq += x * x;
  }
  // numpy.histogram(v, bins): edges linspace(first, last, bins + 1) (i * step + first, the
  // last one exactly `last`), a value's bucket found by scaling then corrected against
  // the edges, the last bucket closed. This file is compiled with -ffp-contract=off, so
  // i * step + first rounds twice, as numpy's does.
  double first = lo, last = hi;
  if (first == last) {
    first -= 0.5;
    last += 0.5;
  }
  std::vector<double> edges(size_t(bins) + 1);
  double bin_step = (last - first) / bins;
  for (int i = 0; i < bins; ++i) edges[i] = double(i) * bin_step + first;
  edges[bins] = last;
  std::vector<double> counts(size_t(bins), 0.0);
  for (double x : v) {
    int64_t i = int64_t((x - first) / (last - first) * bins);
    if (i >= bins) i = bins - 1;
    if (i > 0 && x < edges[i]) --i;
    if (i < bins - 1 && x >= edges[i + 1]) ++i;
    counts[size_t(i)] += 1;
  }
  Proto h;
  h.f64(histo::min, lo).f64(histo::max, hi).f64(histo::num, double(v.size())).f64(histo::sum, sum);
  h.f64(histo::sum_squares, sum_sq).packed(histo::bucket_limit, std::vector<double>(edges.begin() + 1, edges.end()));
  h.packed(histo::bucket, counts);
  write_summary(Proto().bytes(value::tag, tag).message(value::histo, h).buf, step);
}

void SummaryWriter::add_image(std::string_view tag, const Tensor& img, int64_t step, ImageSummaryOptions options) {
  std::string op = "add_image(" + std::string(tag) + ")";
  if (!img.defined()) throw Error(op + ": the image tensor is undefined");
  Tensor t = img.detach();
  if (t.dim() == 2) t = t.unsqueeze(options.layout == ImageLayout::CHW ? 0 : 2);
  if (t.dim() != 3)
    throw Error(op + ": expected an image of shape " + (options.layout == ImageLayout::CHW ? "[C, H, W]" : "[H, W, C]") +
                " or [H, W], got " + img.shape().str());
  if (options.layout == ImageLayout::CHW) t = t.permute({1, 2, 0});
  int64_t h = t.size(0), w = t.size(1), c = t.size(2);
  if (c != 1 && c != 3 && c != 4)
    throw Error(op + ": expected 1, 3 or 4 channels, got " + std::to_string(c) + " in shape " + img.shape().str());
  if (h == 0 || w == 0) throw Error(op + ": expected a non-empty image, got shape " + img.shape().str());
  std::vector<double> v = t.to_vector<double>();
  std::vector<uint8_t> px(v.size());
  bool scale = t.is_floating_point();
  for (size_t i = 0; i < v.size(); ++i) {
    double x = scale ? std::nearbyint(v[i] * 255.0) : v[i];
    px[i] = uint8_t(std::clamp(std::isnan(x) ? 0.0 : x, 0.0, 255.0));
  }
  std::vector<uint8_t> png = encode_png(px.data(), int(w), int(h), int(c));
  Proto im;
  im.varint(image::height, uint64_t(h)).varint(image::width, uint64_t(w)).varint(image::colorspace, uint64_t(c));
  im.bytes(image::encoded, png.data(), png.size());
  write_summary(Proto().bytes(value::tag, tag).message(value::image, im).buf, step);
}

void SummaryWriter::add_text(std::string_view tag, std::string_view text, int64_t step) {
  // as PyTorch writes it: a string tensor of shape [1] for the "text" plugin
  Proto meta;
  meta.message(metadata::plugin_data, Proto().bytes(plugin::name, "text").bytes(plugin::content, ""));
  Proto tensor;
  tensor.varint(tensor::dtype, kDtString)
      .message(tensor::shape, Proto().message(shape::dim, Proto().varint(dim::size, 1)))
      .bytes(tensor::string_val, text);
  write_summary(Proto().bytes(value::tag, tag).message(value::metadata, meta).message(value::tensor, tensor).buf,
                step);
}

}  // namespace reel
