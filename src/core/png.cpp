// PNG encoding: filtered scanlines, one zlib stream in one IDAT chunk, CRCs from zlib's crc32.
#include "kiln/png.h"

#include <fmt/format.h>
#include <zlib.h>

#include <array>
#include <cstdlib>
#include <limits>

#include "core/atomic_file.h"
#include "kiln/error.h"

namespace kiln {

namespace {

constexpr char kSignature[] = "\x89PNG\r\n\x1a\n";
constexpr size_t kBytesPerPixel = 3;

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xFF));
}

void put_chunk(std::string& out, const char (&type)[5], const std::string& data) {
  if (data.size() > 0x7FFFFFFFu)
    throw InvalidArgument(fmt::format("PNG {} chunk of {} bytes exceeds the format's 2^31-1", type, data.size()));
  put_u32(out, static_cast<uint32_t>(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  const uLong crc =
      ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  put_u32(out, static_cast<uint32_t>(crc));
}

// PNG's Paeth predictor: whichever of left, up, upper-left is closest to left + up - upper-left.
uint8_t paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return static_cast<uint8_t>(a);
  if (pb <= pc) return static_cast<uint8_t>(b);
  return static_cast<uint8_t>(c);
}

// Filters one scanline (`prev` is the row above, all zeros for the first row) into out[1..].
void filter_row(PngFilter f, const uint8_t* row, const uint8_t* prev, size_t n, uint8_t* out) {
  out[0] = static_cast<uint8_t>(f);
  for (size_t i = 0; i < n; ++i) {
    const int a = i >= kBytesPerPixel ? row[i - kBytesPerPixel] : 0;
    const int b = prev[i];
    const int c = i >= kBytesPerPixel ? prev[i - kBytesPerPixel] : 0;
    int predicted = 0;
    switch (f) {  // the five filters are the format's fixed set, not an extension point
      case PngFilter::None:
        predicted = 0;
        break;
      case PngFilter::Sub:
        predicted = a;
        break;
      case PngFilter::Up:
        predicted = b;
        break;
      case PngFilter::Average:
        predicted = (a + b) / 2;
        break;
      case PngFilter::Paeth:
        predicted = paeth(a, b, c);
        break;
      case PngFilter::Adaptive:
        break;
    }
    out[1 + i] = static_cast<uint8_t>(row[i] - predicted);
  }
}

uint64_t cost(const std::vector<uint8_t>& filtered) {
  uint64_t sum = 0;
  for (size_t i = 1; i < filtered.size(); ++i) sum += static_cast<uint64_t>(std::abs(static_cast<int8_t>(filtered[i])));
  return sum;
}

std::string filtered_scanlines(int width, int height, const std::vector<uint8_t>& rgb, PngFilter filter) {
  const size_t n = static_cast<size_t>(width) * kBytesPerPixel;
  const std::vector<uint8_t> zeros(n, 0);
  std::string out;
  out.reserve((n + 1) * static_cast<size_t>(height));
  std::vector<uint8_t> best(n + 1), trial(n + 1);
  constexpr std::array kAll{PngFilter::None, PngFilter::Sub, PngFilter::Up, PngFilter::Average, PngFilter::Paeth};
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = rgb.data() + static_cast<size_t>(y) * n;
    const uint8_t* prev = y > 0 ? row - n : zeros.data();
    if (filter != PngFilter::Adaptive) {
      filter_row(filter, row, prev, n, best.data());
    } else {
      uint64_t best_cost = std::numeric_limits<uint64_t>::max();
      for (PngFilter f : kAll) {
        filter_row(f, row, prev, n, trial.data());
        if (const uint64_t c = cost(trial); c < best_cost) {
          best_cost = c;
          best.swap(trial);
        }
      }
    }
    out.append(reinterpret_cast<const char*>(best.data()), best.size());
  }
  return out;
}

std::string deflate(const std::string& raw) {
  uLongf size = ::compressBound(static_cast<uLong>(raw.size()));
  std::string out(size, '\0');
  const int rc = ::compress2(reinterpret_cast<Bytef*>(out.data()), &size, reinterpret_cast<const Bytef*>(raw.data()),
                             static_cast<uLong>(raw.size()), Z_BEST_COMPRESSION);
  if (rc != Z_OK)
    throw Error(fmt::format("zlib compress2 failed with code {} on {} bytes of PNG scanlines", rc, raw.size()));
  out.resize(size);
  return out;
}

}  // namespace

std::string encode_png(int width, int height, const std::vector<uint8_t>& rgb, PngFilter filter) {
  if (width <= 0 || height <= 0)
    throw InvalidArgument(fmt::format("PNG size {}x{}: width and height must be positive", width, height));
  const uint64_t pixels = static_cast<uint64_t>(width) * static_cast<uint64_t>(height);
  if (pixels > (uint64_t{1} << 32))
    throw InvalidArgument(fmt::format("PNG size {}x{} is too large (at most 2^32 pixels)", width, height));
  if (rgb.size() != pixels * kBytesPerPixel)
    throw InvalidArgument(fmt::format("PNG of {}x{} RGB pixels needs {} bytes, got {}", width, height,
                                      pixels * kBytesPerPixel, rgb.size()));
  std::string ihdr;
  put_u32(ihdr, static_cast<uint32_t>(width));
  put_u32(ihdr, static_cast<uint32_t>(height));
  ihdr += std::string{'\x08', '\x02', '\x00', '\x00', '\x00'};  // depth 8, RGB, deflate, filter method 0, no interlace
  std::string png(kSignature, 8);
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", deflate(filtered_scanlines(width, height, rgb, filter)));
  put_chunk(png, "IEND", "");
  return png;
}

void write_png(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb, PngFilter filter) {
  write_file_atomically(path, encode_png(width, height, rgb, filter));
}

}  // namespace kiln
