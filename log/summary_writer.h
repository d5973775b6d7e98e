// SummaryWriter: training logs that TensorBoard reads (`tensorboard --logdir runs`),
// as PyTorch's torch.utils.tensorboard.SummaryWriter writes them: an event file
// events.out.tfevents.<time>.<host>.<pid>.<n> per writer, records framed as TFRecords.
//
//   reel::SummaryWriter tb("runs/mnist");
//   tb.add_scalar("loss/train", loss.item<float>(), step);
//   tb.add_scalars("loss", {{"train", 0.41}, {"test", 0.45}}, epoch);  // one chart, two lines
//   tb.add_histogram("fc1.weight", model.fc1.weight, epoch);
//   tb.add_image("first_batch", x[0], epoch);                       // [C, H, W] in [0, 1]
//   tb.add_text("config", "lr 0.1, batch 64", 0);
//
// Records are buffered and reach the file on flush(), every `flush_secs` seconds of
// adds, and on close() (the destructor closes). Not thread-safe: one writer per thread.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../tensor/tensor.h"

namespace reel {

struct SummaryWriterOptions {
  double flush_secs = 10;           // flush after an add when the last flush is this old
  std::string filename_suffix = {};  // appended to the event file's name
};

enum class ImageLayout { CHW, HWC };
struct ImageSummaryOptions {
  ImageLayout layout = ImageLayout::CHW;  // a 2-D tensor is [H, W], grey
};

class SummaryWriter {
 public:
  // Creates `logdir` (and parents) and a new event file in it.
  explicit SummaryWriter(std::string logdir, SummaryWriterOptions options = {});
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // One point of the chart `tag`; stored as a float32 (TensorBoard's simple_value).
  void add_scalar(std::string_view tag, double value, int64_t step);
  // Several lines on one chart `main_tag`: as PyTorch does, each key gets its own
  // event file in logdir/<main_tag>_<key>/ with the tag `main_tag` (TensorBoard shows
  // the subfolders as runs).
  void add_scalars(std::string_view main_tag, const std::vector<std::pair<std::string, double>>& values,
                   int64_t step);
  // The distribution of a tensor's values (any dtype, any device) in `bins` equal-width
  // buckets over [min, max], binned as numpy.histogram does; its count, sum and sum of
  // squares too. Throws reel::Error for an empty tensor or a NaN/Inf value.
  void add_histogram(std::string_view tag, const Tensor& values, int64_t step, int bins = 64);
  // An image: [C, H, W] (or [H, W, C] with {.layout = ImageLayout::HWC}, or [H, W])
  // with C 1, 3 or 4; u8 as is, floating point in [0, 1] scaled by 255, rounded and
  // clamped. Stored PNG-encoded.
  void add_image(std::string_view tag, const Tensor& image, int64_t step, ImageSummaryOptions options = {});
  // Markdown text, shown by TensorBoard's text plugin.
  void add_text(std::string_view tag, std::string_view text, int64_t step);

  void flush();
  void close();  // flushes and closes every event file; later adds throw reel::Error
  const std::string& logdir() const { return logdir_; }
  const std::string& file() const { return file_; }  // this writer's event file

 private:
  void write_event(const std::vector<uint8_t>& event);
  void write_summary(const std::vector<uint8_t>& value, int64_t step);
  void maybe_flush();

  std::string logdir_, file_;
  SummaryWriterOptions options_;
  std::FILE* out_ = nullptr;
  double last_flush_ = 0;
  std::map<std::string, std::unique_ptr<SummaryWriter>> children_;  // add_scalars' writers, by folder
};

}  // namespace reel
