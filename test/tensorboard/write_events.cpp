// Writes a TensorBoard log with every kind of summary reel::SummaryWriter has, and
// beside it expected.json: the exact inputs, for check_events.py to compare what
// TensorBoard's own reader gets back. Usage: write_events LOGDIR
#include <reel/reel.h>

#include <cstdio>
#include <fstream>

namespace {

void put_values(std::ofstream& out, const char* name, const std::vector<double>& v) {
  out << "\"" << name << "\": [";
  char buf[40];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.17g", v[i]);
    out << (i ? ", " : "") << buf;
  }
  out << "],\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_events LOGDIR\n");
    return 2;
  }
  std::string dir = argv[1];
  reel::manual_seed(7);
  reel::SummaryWriter tb(dir);
  std::vector<double> scalars;
  for (int step = 0; step < 50; ++step) {  // more than the reader's default reservoir keeps
    double v = 1.0 / (step + 3.0);
    scalars.push_back(v);
    tb.add_scalar("loss/train", v, step);
    tb.add_scalars("loss", {{"train", v}, {"test", 2 * v}}, step);
    tb.add_scalars("acc/top1", {{"train", 1 - v}}, step);  // a second group with a key of the first
  }
  reel::Tensor w = reel::randn({64, 33});
  tb.add_histogram("fc.weight", w, 3, 20);
  reel::Tensor constant = reel::full({10}, 0.25f);
  tb.add_histogram("constant", constant, 4, 5);
  reel::Tensor img = reel::rand({3, 5, 7});  // CHW in [0, 1]
  tb.add_image("rgb", img, 5);
  reel::Tensor grey = reel::arange(0, 240, 20, {.dtype = reel::DType::u8}).reshape({3, 4, 1});  // HWC u8
  tb.add_image("grey", grey, 6, {.layout = reel::ImageLayout::HWC});
  tb.add_text("notes", "reel **writes** this", 7);
  tb.close();

  std::ofstream out(dir + "/expected.json");
  out << "{\n";
  put_values(out, "scalars", scalars);
  put_values(out, "histogram", w.to_vector<double>());
  put_values(out, "rgb", img.permute({1, 2, 0}).contiguous().to_vector<double>());
  put_values(out, "grey", grey.to_vector<double>());
  out << "\"file\": \"" << tb.file() << "\"\n}\n";
  return out ? 0 : 1;
}
