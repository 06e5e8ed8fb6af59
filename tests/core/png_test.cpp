// encode_png / write_png: files decoded by the spec-written reader of png_reader.h (chunk CRCs,
// zlib stream, filter bytes) give back exactly the pixels encoded, with every filter.
#include "kiln/png.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/png_reader.h"
#include "kiln/error.h"
#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using kiln::test::expect_error;
using kiln::test::has;
using kiln::testing::decode_png;

// 7x5 pixels mixing a gradient, noise-like values and a repeated row, so that the five filters
// produce different bytes and each has something to undo.
std::vector<uint8_t> known_image(int w, int h) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &rgb[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(30 * x + 7 * y);
      p[1] = static_cast<uint8_t>((x * 73 + y * 151) % 256);
      p[2] = static_cast<uint8_t>(y == 3 ? 250 : 255 - 40 * y);
    }
  return rgb;
}

class PngFilters : public ::testing::TestWithParam<PngFilter> {};

TEST_P(PngFilters, DecodesToTheExactPixelsWithThatFilterOnEveryRow) {
  const int w = 7, h = 5;
  const std::vector<uint8_t> rgb = known_image(w, h);
  const auto png = decode_png(encode_png(w, h, rgb, GetParam()));
  EXPECT_EQ(png.chunk_types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  EXPECT_EQ(png.width, w);
  EXPECT_EQ(png.height, h);
  EXPECT_EQ(png.filters, std::vector<uint8_t>(h, static_cast<uint8_t>(GetParam())));
  EXPECT_EQ(png.rgb, rgb);
}

INSTANTIATE_TEST_SUITE_P(All, PngFilters,
                         ::testing::Values(PngFilter::None, PngFilter::Sub, PngFilter::Up, PngFilter::Average,
                                           PngFilter::Paeth));

TEST(Png, HeaderBytesFollowTheSpecification) {
  const std::string png = encode_png(3, 2, std::vector<uint8_t>(18, 9));
  // Signature, IHDR length 13, "IHDR", width 3, height 2, depth 8, colour type 2, 0, 0, 0.
  const std::string expected("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\0\x03\0\0\0\x02\x08\x02\0\0\0", 29);
  EXPECT_EQ(png.substr(0, 29), expected);
  // IEND: empty, with the CRC of "IEND" that every PNG ends with.
  EXPECT_EQ(png.substr(png.size() - 12), std::string("\0\0\0\0IEND\xae\x42\x60\x82", 12));
}

TEST(Png, AdaptiveFilteringPicksSubForAFlatRowAndUpForARepeatedRow) {
  const int w = 16, h = 3;
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (int x = 0; x < w; ++x) {
    const uint8_t flat[3] = {200, 10, 30};
    for (int c = 0; c < 3; ++c) {
      rgb[x * 3 + c] = flat[c];                                          // row 0: one colour
      rgb[(w + x) * 3 + c] = static_cast<uint8_t>(x * 37 + c * 91);      // row 1: varied
      rgb[(2 * w + x) * 3 + c] = static_cast<uint8_t>(x * 37 + c * 91);  // row 2: row 1 again
    }
  }
  const auto png = decode_png(encode_png(w, h, rgb));
  EXPECT_EQ(png.rgb, rgb);
  ASSERT_EQ(png.filters.size(), 3u);
  EXPECT_EQ(png.filters[0], 1) << "Sub leaves only the first pixel of a one-colour row";
  EXPECT_EQ(png.filters[2], 2) << "Up makes a repeated row all zeros";
}

TEST(Png, WritePngWritesTheFileAndNamesAPathItCannotWrite) {
  const kiln::test::TempDir tmp;
  const fs::path& dir = tmp.path();
  const std::vector<uint8_t> rgb = known_image(40, 30);
  write_png((dir / "a.png").string(), 40, 30, rgb);
  std::ifstream in(dir / "a.png", std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  const auto png = decode_png(bytes.str());
  EXPECT_EQ(png.width, 40);
  EXPECT_EQ(png.height, 30);
  EXPECT_EQ(png.rgb, rgb);
  const std::string missing = (dir / "no_such_folder" / "b.png").string();
  expect_error<IOError>([&] { write_png(missing, 40, 30, rgb); }, missing);
}

TEST(Png, RejectsSizesThatDoNotMatchThePixels) {
  expect_error<InvalidArgument>([] { encode_png(4, 4, std::vector<uint8_t>(47)); }, "needs 48 bytes, got 47");
  expect_error<InvalidArgument>([] { encode_png(0, 4, {}); }, "0x4");
  expect_error<InvalidArgument>([] { encode_png(4, -1, {}); }, "4x-1");
}

}  // namespace
}  // namespace kiln
