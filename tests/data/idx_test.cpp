#include "data/idx.h"

#include <gtest/gtest.h>

#include "data_test_util.h"
#include "kiln/data.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

using data::testing::write_file;

// An IDX uint8 file: magic 00 00 08 <rank>, big-endian dims, then the bytes.
std::string idx_u8(const std::vector<uint32_t>& dims, const std::string& payload) {
  std::string s("\x00\x00\x08", 3);
  s.push_back(static_cast<char>(dims.size()));
  for (uint32_t d : dims)
    for (int shift : {24, 16, 8, 0}) s.push_back(static_cast<char>((d >> shift) & 0xff));
  return s + payload;
}

// Gzip-compresses bytes with Python's gzip module (an independent writer), via files in `dir`.
std::string gzip(const std::filesystem::path& dir, const std::string& bytes) {
  const std::string in = write_file(dir / "gzip_in", bytes);
  const std::string out = (dir / "gzip_out").string();
  data::testing::run_python("import gzip; open('" + out + "', 'wb').write(gzip.compress(open('" + in +
                            "', 'rb').read(), 9))");
  return data::testing::read_bytes(out);
}

TEST(Idx, ReadsBigEndianInt32PlainFile) {
  // magic 0x00000C01 (int32, rank 1), dim 2, values 1 and -2 big-endian.
  const std::string bytes("\x00\x00\x0C\x01\x00\x00\x00\x02\x00\x00\x00\x01\xFF\xFF\xFF\xFE", 16);
  const kiln::test::TempDir dir;
  const Tensor t = read_idx(write_file(dir / "i32.idx", bytes));
  ASSERT_EQ(t.dtype(), DType::Int32);
  EXPECT_EQ(t.data<int32_t>()[0], 1);
  EXPECT_EQ(t.data<int32_t>()[1], -2);
}

TEST(Idx, GzippedAndPlainReadTheSame) {
  const kiln::test::TempDir dir;
  const std::string bytes = idx_u8({2, 2, 3}, std::string("\x00\x01\x02\x03\x04\x05\xff\xfe\xfd\xfc\xfb\xfa", 12));
  const Tensor plain = read_idx(write_file(dir / "a.idx", bytes));
  const Tensor gz = read_idx(write_file(dir / "a.idx.gz", gzip(dir.path(), bytes)));
  // Two gzip members back to back decompress as one stream (as gzip -d does).
  const std::string half = bytes.substr(0, 10);
  const Tensor multi =
      read_idx(write_file(dir / "multi.gz", gzip(dir.path(), half) + gzip(dir.path(), bytes.substr(10))));
  for (const Tensor* t : {&plain, &gz, &multi}) {
    ASSERT_EQ(t->shape(), (Shape{2, 2, 3}));
    EXPECT_EQ(t->data<uint8_t>()[1], 1);
    EXPECT_EQ(t->data<uint8_t>()[6], 255);
  }
}

TEST(Idx, LoadIdxScalesNormalisesAndWidensLabels) {
  const kiln::test::TempDir dir;
  const std::string images = write_file(dir / "img", idx_u8({2, 1, 2}, std::string("\x00\xff\x33\x66", 4)));
  const std::string labels = write_file(dir / "lbl.gz", gzip(dir.path(), idx_u8({2}, std::string("\x07\x02", 2))));
  auto ds = data::load_idx(images, labels);
  const Tensor& x = ds->column("input");
  ASSERT_EQ(x.shape(), (Shape{2, 1, 1, 2}));
  EXPECT_EQ(x.data<float>()[0], 0.0f);
  EXPECT_EQ(x.data<float>()[1], 1.0f);
  EXPECT_EQ(x.data<float>()[2], 0x33 / 255.0f);
  const Tensor& y = ds->column("labels");
  ASSERT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(y.data<int64_t>()[0], 7);
  EXPECT_EQ(y.data<int64_t>()[1], 2);

  data::IdxOptions o;
  o.normalize = data::kFashionMnistNormalization;
  o.image_column = "pixel_values";
  o.label_column = "label";
  auto norm = data::load_idx(images, labels, o);
  EXPECT_EQ(norm->columns(), (std::vector<std::string>{"label", "pixel_values"}));
  // Same float arithmetic as the reader: (p / 255 - mean) / std, exact.
  EXPECT_EQ(norm->column("pixel_values").data<float>()[3], (0x66 / 255.f - 0.2860f) / 0.3530f);
  EXPECT_NEAR(norm->column("pixel_values").data<float>()[1], (1.0 - 0.2860) / 0.3530, 1e-6);
}

TEST(Idx, CorruptFilesNameTheFileAndOffset) {
  const kiln::test::TempDir dir;
  expect_error<IOError>([] { read_idx("/nonexistent/t10k.gz"); }, "cannot open IDX file '/nonexistent/t10k.gz'");
  const std::string garbage = write_file(dir / "garbage.idx", "hello world");
  expect_error<CorruptFile>([&] { read_idx(garbage); }, {garbage, "not an IDX file", "byte offset 0"});
  const std::string type = write_file(dir / "type.idx", std::string("\x00\x00\x07\x01\x00\x00\x00\x01\x05", 9));
  expect_error<CorruptFile>([&] { read_idx(type); }, {type, "unknown IDX element type 0x07 at byte offset 2"});
  const std::string header = write_file(dir / "header.idx", std::string("\x00\x00\x08\x03\x00\x00\x00\x02\x00", 9));
  expect_error<CorruptFile>([&] { read_idx(header); },
                            {header, "3 dimensions need 16 header bytes, the file ends at byte offset 9"});
  const std::string short_data = write_file(dir / "short.idx", idx_u8({9}, "\x01\x02"));
  expect_error<CorruptFile>([&] { read_idx(short_data); },
                            {short_data, "header says 9 bytes of data for shape [9], file has 2",
                             "data from byte offset 8 ends at byte offset 10"});
  const std::string long_data = write_file(dir / "long.idx", idx_u8({1}, "\x01\x02"));
  expect_error<CorruptFile>([&] { read_idx(long_data); },
                            {long_data, "header says 1 bytes", "file has 2", "should end at byte offset 9"});
  // The same count mismatch inside gzip says the offsets are of the decompressed data.
  const std::string gz_short = write_file(dir / "short.gz", gzip(dir.path(), idx_u8({9}, "\x01\x02")));
  expect_error<CorruptFile>([&] { read_idx(gz_short); }, {gz_short, "ends at byte offset 10 of the decompressed data"});

  // A gzip stream cut short, and one with a corrupted deflate block.
  const std::string gz = gzip(dir.path(), idx_u8({4000}, std::string(4000, '\x2a')) + std::string(3000, '\x07'));
  const std::string cut = write_file(dir / "cut.gz", gz.substr(0, gz.size() / 2));
  expect_error<CorruptFile>(
      [&] { read_idx(cut); },
      {cut, "is truncated or corrupt: the gzip stream ends at byte offset " + std::to_string(gz.size() / 2)});
  std::string flipped = gz;
  flipped[10] = static_cast<char>(0xff);  // the first byte of the deflate data: an invalid block type
  const std::string bad = write_file(dir / "bad.gz", flipped);
  expect_error<CorruptFile>([&] { read_idx(bad); }, {bad, "bad gzip data at byte offset 11"});
  const std::string trailing = write_file(dir / "trailing.gz", gz + "junk");
  expect_error<CorruptFile>([&] { read_idx(trailing); },
                            {trailing, "4 bytes of trailing garbage", "byte offset " + std::to_string(gz.size())});
}

// Found by fuzz/idx_fuzz.cpp: a 1.8 KB file whose header claimed [8, 3584, 2^25] bytes made the
// reader allocate them (0xe000000000 bytes) before comparing with the file's size.
TEST(Idx, HeaderClaimingMoreThanTheFileIsRefusedBeforeAllocating) {
  const kiln::test::TempDir dir;
  const std::string huge = write_file(dir / "huge.idx", idx_u8({8, 3584, 1u << 25}, std::string(64, '\x01')));
  expect_error<CorruptFile>(
      [&] { read_idx(huge); },
      {huge, "header says 962072674304 bytes of data for shape [8, 3584, 33554432], file has 64"});
}

TEST(Idx, LoadIdxRejectsMismatchedFiles) {
  const kiln::test::TempDir dir;
  const std::string images = write_file(dir / "img", idx_u8({3, 1, 1}, "\x01\x02\x03"));
  const std::string labels = write_file(dir / "lbl", idx_u8({2}, "\x01\x02"));
  expect_error<CorruptFile>(
      [&] { data::load_idx(images, labels); },
      {"image file '" + images + "' holds 3 images", "label file '" + labels + "' holds 2 labels", "byte offset 4"});
  expect_error<CorruptFile>([&] { data::load_idx(labels, labels); }, {labels, "1 dimensions", "byte offset 3"});
  expect_error<CorruptFile>([&] { data::load_idx(images, images); }, {images, "labels are one integer per item"});
  data::IdxOptions o;
  o.normalize = data::Normalization{0.5f, 0.0f};
  expect_error<InvalidArgument>([&] { data::load_idx(images, labels, o); }, "normalize.std must be positive");
}

}  // namespace
}  // namespace kiln
