// A PNG reader for tests, written from the specification (https://www.w3.org/TR/png/) and
// independent of the encoder: the signature, every chunk's length and CRC-32 (zlib's crc32), IHDR,
// the concatenated IDAT data inflated with zlib, and the five scanline filters undone.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace kiln::testing {

struct DecodedPng {
  int width = 0, height = 0;
  std::vector<std::string> chunk_types;  // in file order
  std::vector<uint8_t> filters;          // each scanline's filter type byte
  std::vector<uint8_t> rgb;              // unfiltered pixels, rows top first
};

inline uint32_t read_be32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(s.at(at + i));
  return v;
}

// Fails the calling test (and returns what it has) on any violation of the format.
inline DecodedPng decode_png(const std::string& png) {
  DecodedPng out;
  if (png.size() < 8 || png.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) != 0) {
    ADD_FAILURE() << "no PNG signature";
    return out;
  }
  std::string idat;
  size_t at = 8;
  int depth = 0, colour = 0, interlace = -1;
  while (at < png.size()) {
    if (at + 12 > png.size()) {
      ADD_FAILURE() << "truncated chunk header at byte " << at;
      return out;
    }
    const uint32_t length = read_be32(png, at);
    if (at + 12 + length > png.size()) {
      ADD_FAILURE() << "chunk at byte " << at << " runs past the end";
      return out;
    }
    const std::string type = png.substr(at + 4, 4), data = png.substr(at + 8, length);
    const uLong crc = ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(png.data() + at + 4), length + 4);
    EXPECT_EQ(read_be32(png, at + 8 + length), static_cast<uint32_t>(crc)) << "CRC of chunk " << type;
    out.chunk_types.push_back(type);
    if (type == "IHDR") {
      EXPECT_EQ(length, 13u);
      out.width = static_cast<int>(read_be32(data, 0));
      out.height = static_cast<int>(read_be32(data, 4));
      depth = static_cast<unsigned char>(data.at(8));
      colour = static_cast<unsigned char>(data.at(9));
      EXPECT_EQ(data.at(10), 0) << "compression method";
      EXPECT_EQ(data.at(11), 0) << "filter method";
      interlace = static_cast<unsigned char>(data.at(12));
    } else if (type == "IDAT") {
      idat += data;
    }
    at += 12 + length;
  }
  EXPECT_EQ(depth, 8);
  EXPECT_EQ(colour, 2) << "colour type (2 = RGB)";
  EXPECT_EQ(interlace, 0);
  const size_t stride = static_cast<size_t>(out.width) * 3;
  std::vector<uint8_t> raw((stride + 1) * static_cast<size_t>(out.height));
  uLongf raw_size = raw.size();
  const int rc = ::uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size());
  EXPECT_EQ(rc, Z_OK) << "inflating IDAT";
  EXPECT_EQ(raw_size, raw.size()) << "inflated size";
  if (rc != Z_OK || raw_size != raw.size()) return out;
  out.rgb.assign(stride * static_cast<size_t>(out.height), 0);
  for (int y = 0; y < out.height; ++y) {
    const uint8_t filter = raw[static_cast<size_t>(y) * (stride + 1)];
    out.filters.push_back(filter);
    const uint8_t* in = &raw[static_cast<size_t>(y) * (stride + 1) + 1];
    uint8_t* row = &out.rgb[static_cast<size_t>(y) * stride];
    const uint8_t* up = y > 0 ? row - stride : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= 3 ? row[i - 3] : 0, b = up ? up[i] : 0, c = (up && i >= 3) ? up[i - 3] : 0;
      int predictor = 0;
      switch (filter) {
        case 0:
          predictor = 0;
          break;
        case 1:
          predictor = a;
          break;
        case 2:
          predictor = b;
          break;
        case 3:
          predictor = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predictor = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
          break;
        }
        default:
          ADD_FAILURE() << "row " << y << " has filter type " << int{filter};
          return out;
      }
      row[i] = static_cast<uint8_t>(in[i] + predictor);
    }
  }
  return out;
}

}  // namespace kiln::testing
