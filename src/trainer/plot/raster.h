// A small RGB canvas for `kiln plot`: rectangles, anti-aliased thick lines and discs, and text in
// the built-in bitmap font (plot_font.h). Coordinates are pixels, x to the right, y down; a pixel's
// centre is at (x + 0.5, y + 0.5). Drawing is clipped to the clip rectangle (the whole canvas by
// default), so a curve never spills out of its panel.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace kiln::trainer::plot {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

struct Rect {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // [x0, x1) x [y0, y1)
  int width() const { return x1 - x0; }
  int height() const { return y1 - y0; }
};

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);

  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<uint8_t>& rgb() const { return rgb_; }
  Rgb at(int x, int y) const;

  void set_clip(const Rect& r);
  void reset_clip() { clip_ = {0, 0, width_, height_}; }

  // Mixes colour c into pixel (x, y) with weight alpha in [0, 1]; outside the clip it does nothing.
  void blend(int x, int y, Rgb c, double alpha);
  void fill_rect(const Rect& r, Rgb c);
  void outline_rect(const Rect& r, Rgb c);  // one pixel wide, inside r
  // A segment `width` pixels thick with round ends; each pixel's coverage is its distance to the
  // segment against the half width, which anti-aliases the edge over one pixel.
  void line(double x0, double y0, double x1, double y1, double width, Rgb c);
  void disc(double cx, double cy, double radius, Rgb c);

  // Text with its top-left corner at (x, y), each font pixel drawn as scale x scale pixels.
  void text(int x, int y, std::string_view s, int scale, Rgb c);
  // The same turned 90 degrees counter-clockwise (reading upwards), with its bottom-left at (x, y).
  void text_up(int x, int y, std::string_view s, int scale, Rgb c);

 private:
  int width_, height_;
  Rect clip_;
  std::vector<uint8_t> rgb_;
};

// Pixel extent of s at scale: width without the trailing blank column, height of a capital.
int text_width(std::string_view s, int scale);
int text_height(int scale);  // cap height (7 rows); descenders reach 2 rows lower

}  // namespace kiln::trainer::plot
