// .npz and .npy datasets: archives written by NumPy itself (np.savez, np.savez_compressed via
// Debian's /usr/bin/python3), then corrupted byte by byte at offsets the test computes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "data_test_util.h"
#include "kiln/data.h"
#include "kiln/npy.h"
#include "test_util.h"

namespace kiln::data {
namespace {

using kiln::test::expect_error;

using testing::read_bytes;
using testing::run_python;
using testing::write_file;

// x: float32 [6, 2] = arange(12) / 4, y: int64 [6] = 0..5 * 3, m: uint8 [6, 3] (a third array).
void write_npz(const std::string& path, bool compressed) {
  run_python(
      fmt::format("import numpy as np; np.{}('{}', x=(np.arange(12, dtype=np.float32) / 4).reshape(6, 2), "
                  "y=np.arange(6, dtype=np.int64) * 3, m=np.arange(18, dtype=np.uint8).reshape(6, 3))",
                  compressed ? "savez_compressed" : "savez", path));
}

uint32_t le32(const std::string& b, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
uint16_t le16(const std::string& b, size_t at) {
  uint16_t v = 0;
  std::memcpy(&v, b.data() + at, 2);
  return v;
}

// Offsets read straight from the archive (NumPy's zipfile writes no archive comment).
struct Layout {
  size_t directory;                    // central directory offset
  std::map<std::string, size_t> data;  // member name -> data offset
};
Layout layout(const std::string& b) {
  Layout l;
  const size_t end = b.size() - 22;
  l.directory = le32(b, end + 16);
  size_t p = l.directory;
  for (uint16_t i = 0; i < le16(b, end + 10); ++i) {
    const std::string name = b.substr(p + 46, le16(b, p + 28));
    const size_t local = le32(b, p + 42);
    l.data[name] = local + 30 + le16(b, local + 26) + le16(b, local + 28);
    p += 46 + le16(b, p + 28) + le16(b, p + 30) + le16(b, p + 32);
  }
  return l;
}

void expect_xy(const TensorDataset& ds) {
  ASSERT_EQ(ds.size(), 6u);
  const Tensor& x = ds.column("x");
  ASSERT_EQ(x.shape(), (Shape{6, 2}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(x.data<float>()[i], float(i) / 4);
  const Tensor& y = ds.column("y");
  ASSERT_EQ(y.dtype(), DType::Int64);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y.data<int64_t>()[i], 3 * i);
}

TEST(Npz, ReadsSavezAndSavezCompressed) {
  const kiln::test::TempDir dir;
  for (bool compressed : {false, true}) {
    const std::string path = (dir / (compressed ? "c.npz" : "s.npz")).string();
    write_npz(path, compressed);
    auto all = load_npz(path);
    EXPECT_EQ(all->columns(), (std::vector<std::string>{"m", "x", "y"}));
    expect_xy(*all);
    EXPECT_EQ(all->column("m").data<uint8_t>()[17], 17);
    // Selecting and renaming arrays: {"x" -> "input", "y" -> "labels"}.
    auto renamed = load_npz(path, {{"x", "input"}, {"y", "labels"}});
    EXPECT_EQ(renamed->columns(), (std::vector<std::string>{"input", "labels"}));
    EXPECT_EQ(renamed->get(5).at("labels").data<int64_t>()[0], 15);
    expect_error<KeyError>([&] { load_npz(path, {{"images", "input"}}); }, {path, "no array 'images'", "m, x, y"});
  }
}

TEST(Npz, CorruptArchivesNameTheFileAndOffset) {
  const kiln::test::TempDir dir;
  const std::string good_path = (dir / "good.npz").string();
  write_npz(good_path, false);
  const std::string good = read_bytes(good_path);
  const Layout l = layout(good);
  const auto variant = [&](const std::string& name, const std::string& bytes) { return write_file(dir / name, bytes); };

  // Truncated: the end record is gone.
  const std::string cut = variant("cut.npz", good.substr(0, good.size() - 30));
  expect_error<CorruptFile>([&] { load_npz(cut); }, {cut, "no end-of-central-directory record", "from byte offset 0"});
  // Central directory signature overwritten.
  std::string b = good;
  b[l.directory] = 'X';
  const std::string dir_sig = variant("dirsig.npz", b);
  expect_error<CorruptFile>([&] { load_npz(dir_sig); }, {dir_sig, "bad zip central directory",
                                                         "entry 0 of 3 at byte offset " + std::to_string(l.directory)});
  // Central directory offset pointing past the end record.
  b = good;
  const uint32_t far = static_cast<uint32_t>(good.size());
  std::memcpy(b.data() + good.size() - 22 + 16, &far, 4);
  const std::string dir_off = variant("diroff.npz", b);
  expect_error<CorruptFile>([&] { load_npz(dir_off); },
                            {dir_off, "bad zip central directory", "at byte offset " + std::to_string(far)});
  // A flipped data byte in a stored member fails the CRC.
  b = good;
  const size_t x_data = l.data.at("x.npy");
  b[x_data + 130] ^= 0x40;
  const std::string crc = variant("crc.npz", b);
  expect_error<CorruptFile>([&] { load_npz(crc); },
                            {crc, "member 'x.npy'", "data at byte offset " + std::to_string(x_data), "CRC-32"});
  // Cut in the middle of a member's data (the directory is gone too).
  const std::string mid = variant("mid.npz", good.substr(0, x_data + 20));
  expect_error<CorruptFile>([&] { load_npz(mid); }, {mid, "no end-of-central-directory record"});
}

// Found by fuzz/npz_fuzz.cpp: a directory entry claiming that a few compressed bytes inflate to
// 4 GiB made the reader allocate 4 GiB before inflating anything.
TEST(Npz, ClaimedSizeBeyondDeflatesRatioIsRefusedBeforeAllocating) {
  const kiln::test::TempDir dir;
  const std::string path = (dir / "c.npz").string();
  write_npz(path, true);
  std::string b = read_bytes(path);
  const size_t entry = layout(b).directory;  // the first member's central directory entry
  const uint32_t compressed = le32(b, entry + 20);
  const uint32_t huge = 0xF0000000u;
  std::memcpy(b.data() + entry + 24, &huge, 4);  // its uncompressed size
  const std::string bad = write_file(dir / "huge.npz", b);
  expect_error<CorruptFile>([&] { load_npz(bad); },
                            {bad, std::to_string(compressed) + " compressed bytes inflate to " + std::to_string(huge),
                             "more than deflate can make of them"});
}

TEST(Npz, BadNpyInsideTheArchive) {
  // Write the archive ourselves from Python with a broken header for 'x' (stored, so the header's
  // file offset is the member data's offset + 10).
  const kiln::test::TempDir dir;
  const std::string path = (dir / "hdr.npz").string();
  run_python(
      fmt::format("import zipfile, io, numpy as np\n"
                  "buf = io.BytesIO(); np.save(buf, np.arange(4, dtype=np.float32)); raw = buf.getvalue()\n"
                  "raw = raw.replace(b'shape', b'shapf')\n"
                  "z = zipfile.ZipFile('{}', 'w'); z.writestr('x.npy', raw); z.close()",
                  path));
  const size_t data = layout(read_bytes(path)).data.at("x.npy");
  expect_error<CorruptFile>(
      [&] { load_npz(path); },
      {path, "member 'x.npy'", "bad .npy array at byte offset " + std::to_string(data + 10), "lacks 'shape'"});
  // Deflated, with the data cut short: offsets are of the decompressed member.
  const std::string short_path = (dir / "short.npz").string();
  run_python(
      fmt::format("import zipfile, io, numpy as np\n"
                  "buf = io.BytesIO(); np.save(buf, np.arange(40, dtype=np.float32)); raw = buf.getvalue()[:-8]\n"
                  "z = zipfile.ZipFile('{}', 'w', zipfile.ZIP_DEFLATED); z.writestr('x.npy', raw); z.close()",
                  short_path));
  const size_t compressed = layout(read_bytes(short_path)).data.at("x.npy");
  expect_error<CorruptFile>([&] { load_npz(short_path); },
                            {short_path, "byte offset 128 of the decompressed member",
                             "compressed data at byte offset " + std::to_string(compressed), "truncated .npy file"});
  // A corrupted deflate stream.
  std::string b = read_bytes(short_path);
  b[compressed] = static_cast<char>(0xff);
  const std::string bad = write_file(dir / "deflate.npz", b);
  expect_error<CorruptFile>([&] { load_npz(bad); }, {bad, "member 'x.npy'", "bad deflate data at byte offset"});
}

TEST(Npz, Zip64EndRecord) {
  // Over 65535 members make Python's zipfile write a zip64 end record and locator.
  const kiln::test::TempDir dir;
  const std::string path = (dir / "z64.npz").string();
  run_python(
      fmt::format("import zipfile, io, numpy as np\n"
                  "buf = io.BytesIO(); np.save(buf, np.arange(3, dtype=np.int64)); raw = buf.getvalue()\n"
                  "z = zipfile.ZipFile('{}', 'w'); z.writestr('x.npy', raw)\n"
                  "for i in range(65536): z.writestr('pad%d' % i, b'')\n"
                  "z.close()",
                  path));
  const std::string b = read_bytes(path);
  ASSERT_EQ(le16(b, b.size() - 22 + 10), 0xffff);  // the classic record defers to zip64
  auto ds = load_npz(path);
  EXPECT_EQ(ds->columns(), std::vector<std::string>{"x"});
  ASSERT_EQ(ds->size(), 3u);
  EXPECT_EQ(ds->column("x").data<int64_t>()[2], 2);
}

TEST(Npy, ColumnsFromFiles) {
  const kiln::test::TempDir dir;
  const std::string x = (dir / "x.npy").string();
  const std::string y = (dir / "y.npy").string();
  save_npy(Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6}), x);
  save_npy(Tensor::from_vector<int64_t>({3}, {7, 8, 9}), y);
  auto ds = load_npy({{"input", x}, {"labels", y}});
  EXPECT_EQ(ds->size(), 3u);
  EXPECT_EQ(ds->get(2).at("input").data<float>()[1], 6.0f);
  EXPECT_EQ(ds->get(2).at("labels").data<int64_t>()[0], 9);

  save_npy(Tensor::from_vector<int64_t>({4}, {1, 2, 3, 4}), y);
  expect_error<ShapeError>([&] { load_npy({{"input", x}, {"labels", y}}); }, "column 'labels' has 4 items");
  expect_error<IOError>([&] { load_npy({{"input", (dir / "none.npy").string()}}); }, "none.npy");

  const std::string good = read_bytes(x);  // version 1.0: 10-byte prefix, the header, then the data
  const std::string data_at = "at byte offset " + std::to_string(10 + le16(good, 8));
  const std::string magic = write_file(dir / "magic.npy", "NUMPY" + good);
  expect_error<CorruptFile>([&] { load_npy({{"x", magic}}); }, {magic, "bad .npy array at byte offset 0"});
  std::string h = good;
  h.replace(h.find("descr"), 5, "desxr");
  const std::string header = write_file(dir / "header.npy", h);
  expect_error<CorruptFile>([&] { load_npy({{"x", header}}); }, {header, "at byte offset 10", "lacks 'descr'"});
  const std::string cut_header = write_file(dir / "cuthdr.npy", good.substr(0, 40));
  expect_error<CorruptFile>([&] { load_npy({{"x", cut_header}}); }, {cut_header, "at byte offset 40"});
  const std::string cut = write_file(dir / "cut.npy", good.substr(0, good.size() - 3));
  expect_error<CorruptFile>([&] { load_npy({{"x", cut}}); }, {cut, data_at, "truncated .npy file"});
  const std::string extra = write_file(dir / "extra.npy", good + "xx");
  expect_error<CorruptFile>([&] { load_npy({{"x", extra}}); }, {extra, data_at, "2 unexpected bytes"});
}

}  // namespace
}  // namespace kiln::data
