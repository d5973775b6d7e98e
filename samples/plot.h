// Training curves as a PNG image, with no plotting library: an RGB canvas, lines,
// axes with numbered ticks (a 3x5 digit font), and a small PNG encoder over zlib.
//
//   plot::Panel loss{{{epochs, train_loss, plot::kBlue}, {epochs, test_loss, plot::kOrange}}};
//   plot::Panel acc{{{epochs, train_acc, plot::kBlue}, {epochs, test_acc, plot::kOrange}}};
//   plot::write_chart("curves.png", {loss, acc});  // two panels side by side
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace plot {

struct Rgb {
  uint8_t r, g, b;
};
inline constexpr Rgb kBlue{31, 119, 180}, kOrange{255, 127, 14}, kBlack{0, 0, 0}, kGrey{220, 220, 220},
    kWhite{255, 255, 255};

class Canvas {
 public:
  Canvas(int width, int height, Rgb background = kWhite);
  int width() const { return w_; }
  int height() const { return h_; }
  void set(int x, int y, Rgb c);  // ignores points off the canvas
  Rgb at(int x, int y) const;
  void line(int x0, int y0, int x1, int y1, Rgb c, int thickness = 1);
  // Draws digits, '.' and '-' (other characters leave a gap) with its top-left at (x, y).
  void text(int x, int y, const std::string& s, Rgb c, int scale = 2);
  static int text_width(const std::string& s, int scale = 2) { return int(s.size()) * 4 * scale; }
  const std::vector<uint8_t>& pixels() const { return px_; }  // RGB rows, top to bottom

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

// Encodes the canvas as an 8-bit RGB PNG and writes it (to a temporary, then renamed,
// so no half-written image is left). Throws std::runtime_error naming the path.
void write_png(const std::string& path, const Canvas& canvas);

struct Line {
  std::vector<double> x, y;
  Rgb color;
};
struct Panel {
  std::vector<Line> lines;  // axes fit the data of all lines
};
// Panels side by side, each with axes, grid and numbered ticks.
void draw_panel(Canvas& canvas, const Panel& panel, int left, int top, int width, int height);
void write_chart(const std::string& path, const std::vector<Panel>& panels, int panel_width = 420,
                 int panel_height = 320);

}  // namespace plot
