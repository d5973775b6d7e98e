// Canvas drawing and the PNG encoder. PNG: the 8-byte signature, then chunks of
// (length, type, data, CRC-32 of type and data): IHDR (size, 8-bit RGB), IDAT (the
// zlib-compressed rows, each led by filter byte 0) and IEND.
#include "plot.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace plot {

namespace {

// 3x5 glyphs, one row per 3 bits (top row first): digits 0-9, '.', '-'
constexpr uint16_t kGlyphs[12] = {
    0b111101101101111, 0b010110010010111, 0b111001111100111, 0b111001111001111, 0b101101111001001,
    0b111100111001111, 0b111100111101111, 0b111001001001001, 0b111101111101111, 0b111101111001111,
    0b000000000000010, 0b000000111000000,
};

void put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

void chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put32(out, uint32_t(data.size()));
  size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put32(out, uint32_t(crc32(0, out.data() + start, uInt(out.size() - start))));
}

// A tick step of 1, 2 or 5 times a power of ten giving about `target` intervals.
double nice_step(double span, int target) {
  double raw = span / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

std::string tick_label(double v, double step) {
  int decimals = std::max(0, int(-std::floor(std::log10(step) + 1e-9)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::abs(v) < step * 1e-6 ? 0.0 : v);
  return buf;
}

}  // namespace

Canvas::Canvas(int width, int height, Rgb background) : w_(width), h_(height), px_(size_t(width) * height * 3) {
  for (size_t i = 0; i < px_.size(); i += 3) {
    px_[i] = background.r;
    px_[i + 1] = background.g;
    px_[i + 2] = background.b;
  }
}

void Canvas::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
  uint8_t* p = &px_[(size_t(y) * w_ + x) * 3];
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

Rgb Canvas::at(int x, int y) const {
  const uint8_t* p = &px_[(size_t(y) * w_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void Canvas::line(int x0, int y0, int x1, int y1, Rgb c, int thickness) {
  // Bresenham, stamping a square of `thickness` pixels at each step
  int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy, lo = -(thickness - 1) / 2, hi = thickness / 2;
  for (;;) {
    for (int a = lo; a <= hi; ++a)
      for (int b = lo; b <= hi; ++b) set(x0 + a, y0 + b, c);
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}

void Canvas::text(int x, int y, const std::string& s, Rgb c, int scale) {
  for (size_t i = 0; i < s.size(); ++i) {
    int g = s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : s[i] == '.' ? 10 : s[i] == '-' ? 11 : -1;
    if (g < 0) continue;
    for (int row = 0; row < 5; ++row)
      for (int col = 0; col < 3; ++col)
        if (kGlyphs[g] >> (14 - row * 3 - col) & 1)
          for (int a = 0; a < scale; ++a)
            for (int b = 0; b < scale; ++b) set(x + int(i) * 4 * scale + col * scale + a, y + row * scale + b, c);
  }
}

void write_png(const std::string& path, const Canvas& canvas) {
  int w = canvas.width(), h = canvas.height();
  std::vector<uint8_t> raw;
  raw.reserve(size_t(h) * (size_t(w) * 3 + 1));
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);  // filter: none
    auto row = canvas.pixels().begin() + ptrdiff_t(y) * w * 3;
    raw.insert(raw.end(), row, row + ptrdiff_t(w) * 3);
  }
  uLongf zsize = compressBound(uLong(raw.size()));
  std::vector<uint8_t> z(zsize);
  if (compress2(z.data(), &zsize, raw.data(), uLong(raw.size()), 6) != Z_OK)
    throw std::runtime_error("write_png: " + path + ": zlib could not compress the image");
  z.resize(zsize);
  std::vector<uint8_t> ihdr;
  put32(ihdr, uint32_t(w));
  put32(ihdr, uint32_t(h));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8 bits, RGB, deflate, no filter set, no interlace
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", {});
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
    if (!f) throw std::runtime_error("write_png: " + tmp + ": cannot write");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error("write_png: " + path + ": cannot rename the temporary: " + ec.message());
}

void draw_panel(Canvas& c, const Panel& panel, int left, int top, int width, int height) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Line& l : panel.lines)
    for (size_t i = 0; i < std::min(l.x.size(), l.y.size()); ++i) {
      if (!std::isfinite(l.x[i]) || !std::isfinite(l.y[i])) continue;
      x0 = std::min(x0, l.x[i]), x1 = std::max(x1, l.x[i]), y0 = std::min(y0, l.y[i]), y1 = std::max(y1, l.y[i]);
    }
  if (!(x0 <= x1)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;  // no data: empty axes
  if (x1 - x0 < 1e-12) x1 = x0 + 1;
  if (y1 - y0 < 1e-12) y0 -= 0.5, y1 += 0.5;
  double ys = nice_step(y1 - y0, 5), xs = std::max(1.0, nice_step(x1 - x0, 6));
  y0 = std::floor(y0 / ys) * ys, y1 = std::ceil(y1 / ys) * ys;
  // the plot area leaves room for tick labels on the left and below
  int pl = left + 64, pr = left + width - 12, pt = top + 12, pb = top + height - 30;
  auto px = [&](double x) { return pl + int(std::lround((x - x0) / (x1 - x0) * (pr - pl))); };
  auto py = [&](double y) { return pb - int(std::lround((y - y0) / (y1 - y0) * (pb - pt))); };
  for (double y = y0; y <= y1 + ys * 1e-6; y += ys) {
    c.line(pl, py(y), pr, py(y), kGrey);
    std::string s = tick_label(y, ys);
    c.text(pl - 6 - Canvas::text_width(s), py(y) - 5, s, kBlack);
  }
  for (double x = std::ceil(x0 / xs) * xs; x <= x1 + xs * 1e-6; x += xs) {
    c.line(px(x), pb, px(x), pb + 4, kBlack);
    std::string s = tick_label(x, xs);
    c.text(px(x) - Canvas::text_width(s) / 2, pb + 8, s, kBlack);
  }
  c.line(pl, pt, pl, pb, kBlack);
  c.line(pl, pb, pr, pb, kBlack);
  for (const Line& l : panel.lines)
    for (size_t i = 0; i < std::min(l.x.size(), l.y.size()); ++i) {
      if (!std::isfinite(l.y[i])) continue;
      c.line(px(l.x[i]), py(l.y[i]), px(l.x[i]), py(l.y[i]), l.color, 5);  // a dot marks each point
      if (i > 0 && std::isfinite(l.y[i - 1]))
        c.line(px(l.x[i - 1]), py(l.y[i - 1]), px(l.x[i]), py(l.y[i]), l.color, 2);
    }
}

void write_chart(const std::string& path, const std::vector<Panel>& panels, int panel_width, int panel_height) {
  Canvas c(panel_width * int(std::max<size_t>(1, panels.size())), panel_height);
  for (size_t i = 0; i < panels.size(); ++i) draw_panel(c, panels[i], int(i) * panel_width, 0, panel_width, panel_height);
  write_png(path, c);
}

}  // namespace plot
