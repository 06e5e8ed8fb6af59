// A PNG encoder for 8-bit RGB pictures (what `kiln plot` writes), using zlib for the compression and
// the chunk CRCs. Format: https://www.w3.org/TR/png/ — the 8-byte signature, then chunks of
// (uint32 big-endian length, 4-byte type, data, CRC-32 of type and data): IHDR (width, height, bit
// depth 8, colour type 2 = RGB, compression 0, filter method 0, no interlace), one IDAT holding the
// zlib stream of the filtered scanlines, and IEND. Each scanline starts with its filter type byte.
//
//   std::vector<uint8_t> rgb(w * h * 3);                  // row by row, top first, R G B per pixel
//   kiln::write_png("picture.png", w, h, rgb);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// The per-scanline filters of PNG's filter method 0. Adaptive picks, for each row, the filter whose
// output has the smallest sum of absolute values (read as signed bytes): the heuristic the PNG
// specification recommends and libpng uses, which makes flat areas and gradients compress well.
enum class PngFilter { None = 0, Sub = 1, Up = 2, Average = 3, Paeth = 4, Adaptive = 5 };

// The bytes of a PNG file. InvalidArgument when width or height is not positive or too large, or
// when rgb does not hold width * height * 3 bytes.
std::string encode_png(int width, int height, const std::vector<uint8_t>& rgb, PngFilter filter = PngFilter::Adaptive);

// encode_png written atomically to path (a crash leaves the old file or the whole new one).
// IOError naming the path when it cannot be written.
void write_png(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb,
               PngFilter filter = PngFilter::Adaptive);

}  // namespace kiln
