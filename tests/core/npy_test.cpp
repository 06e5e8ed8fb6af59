#include "kiln/npy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class NpyFiles : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_bytes(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  kiln::test::TempDir dir_;
};

// The bytes np.save writes for np.arange(6, dtype=np.float32).reshape(2, 3) (NumPy 1.24).
std::string numpy_header_f32_2x3() {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  dict.append(118 - dict.size() - 1, ' ');
  dict += '\n';
  return std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict;
}

// A hand-built file with any header text, version and data.
std::string make_npy(const std::string& dict, const std::string& data, int major = 1) {
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  const size_t n = dict.size();
  out.push_back(static_cast<char>(n & 0xff));
  out.push_back(static_cast<char>(n >> 8));
  if (major >= 2) out.append(2, '\0');
  return out + dict + data;
}

using kiln::test::error_message;
using kiln::test::expect_error;
using kiln::test::has;

TEST(Npy, SerializeMatchesNumpyBytes) {
  Tensor t = Tensor::from_vector<float>({2, 3}, {0, 1, 2, 3, 4, 5});
  const std::string bytes = serialize_npy(t);
  const std::string header = numpy_header_f32_2x3();
  ASSERT_EQ(bytes.size(), header.size() + 24);
  EXPECT_EQ(bytes.substr(0, header.size()), header);
  EXPECT_EQ(std::memcmp(bytes.data() + header.size(), t.raw_data(), 24), 0);
}

TEST(Npy, DescrsFollowNumpy) {
  EXPECT_EQ(npy_descr(DType::Float32), "<f4");
  EXPECT_EQ(npy_descr(DType::Float16), "<f2");
  EXPECT_EQ(npy_descr(DType::BFloat16), "<V2");
  EXPECT_EQ(npy_descr(DType::Int8), "|i1");
  EXPECT_EQ(npy_descr(DType::Uint64), "<u8");
  EXPECT_EQ(npy_descr(DType::Bool), "|b1");
}

TEST_F(NpyFiles, EveryDtypeRoundTripsBitExactly) {
  const std::vector<Shape> shapes = {{}, {0}, {5}, {2, 3, 4}, {3, 0, 2}};
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64, DType::Int32,
                   DType::Int16, DType::Int8, DType::Uint64, DType::Uint32, DType::Uint16, DType::Uint8, DType::Bool}) {
    for (const Shape& shape : shapes) {
      Tensor t = Tensor::empty(dt, shape);
      auto* p = static_cast<uint8_t*>(t.raw_data());
      for (size_t i = 0; i < t.nbytes(); ++i) p[i] = dt == DType::Bool ? i % 2 : static_cast<uint8_t>(i * 37 + 11);
      const std::string file = path("t.npy");
      save_npy(t, file);
      Tensor back = load_npy(file);
      SCOPED_TRACE(t.describe());
      EXPECT_EQ(back.dtype(), dt);
      EXPECT_EQ(back.shape(), shape);
      ASSERT_EQ(back.nbytes(), t.nbytes());
      EXPECT_EQ(std::memcmp(back.raw_data(), t.raw_data(), t.nbytes()), 0);
      // Data starts 64-byte aligned, as NumPy writes it.
      EXPECT_EQ((fs::file_size(file) - t.nbytes()) % 64, 0u);
    }
  }
}

TEST_F(NpyFiles, SaveIsAtomicAndLeavesNoTempFiles) {
  save_npy(Tensor::from_vector<int32_t>({2}, {1, 2}), path("a.npy"));
  save_npy(Tensor::from_vector<int32_t>({3}, {7, 8, 9}), path("a.npy"));  // replaces
  Tensor back = load_npy(path("a.npy"));
  EXPECT_EQ(back.to_int64_vector(), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()), 1);
}

TEST_F(NpyFiles, SaveIntoMissingFolderNamesThePath) {
  const std::string target = path("no/such/dir/x.npy");
  expect_error<IOError>([&] { save_npy(Tensor::scalar<float>(1.f), target); }, target);
}

TEST(Npy, NonContiguousTensorsAreWrittenInCOrder) {
  Tensor t = Tensor::from_vector<float>({2, 3}, {0, 1, 2, 3, 4, 5}).permute({1, 0});
  Tensor back = parse_npy(serialize_npy(t));
  EXPECT_EQ(back.shape(), (Shape{3, 2}));
  const float* d = back.data<float>();
  EXPECT_EQ(std::vector<float>(d, d + 6), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Npy, ReadsVersions2And3AndLegacyHeaders) {
  const std::string data("\x01\x00\x02\x00\x03\x00", 6);
  for (int major : {2, 3}) {
    Tensor t = parse_npy(make_npy("{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }\n", data, major));
    EXPECT_EQ(t.dtype(), DType::Int16);
    EXPECT_EQ(t.to_int64_vector(), (std::vector<int64_t>{1, 2, 3}));
  }
  // Key order free, double quotes, Python 2 long suffix, no trailing comma; '<V2' read as bfloat16.
  Tensor t = parse_npy(make_npy("{\"shape\": (3L,), \"fortran_order\": False, \"descr\": \"<V2\"}", data));
  EXPECT_EQ(t.dtype(), DType::BFloat16);
  EXPECT_EQ(t.shape(), (Shape{3}));
}

TEST(Npy, BoolBytesAreNormalised) {
  Tensor t =
      parse_npy(make_npy("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x02\xff", 3)));
  EXPECT_EQ(t.to_int64_vector(), (std::vector<int64_t>{0, 1, 1}));
}

TEST(Npy, FortranOrderAndBigEndianAreUnsupported) {
  const std::string data(24, '\0');
  std::string msg = error_message<Unsupported>(
      [&] { parse_npy(make_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data), "f.npy"); });
  EXPECT_TRUE(has(msg, "f.npy") && has(msg, "Fortran")) << msg;
  msg = error_message<Unsupported>(
      [&] { parse_npy(make_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", data), "b.npy"); });
  EXPECT_TRUE(has(msg, "b.npy") && has(msg, "big-endian") && has(msg, ">f4")) << msg;
  msg = error_message<Unsupported>(
      [&] { parse_npy(make_npy("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", data), "c.npy"); });
  EXPECT_TRUE(has(msg, "c.npy") && has(msg, "'<c8'")) << msg;
  // One-dimensional Fortran order is the same layout, and one-byte types have no byte order.
  EXPECT_EQ(parse_npy(make_npy("{'descr': '>i1', 'fortran_order': True, 'shape': (2,), }", "ab")).numel(), 2);
}

TEST_F(NpyFiles, TruncatedFilesAreIOErrorsNamingTheFile) {
  const std::string full = serialize_npy(Tensor::zeros(DType::Float64, {4, 4}));
  // Cut inside the 6-byte magic, the file is not recognisable as .npy at all (InvalidArgument).
  write_bytes("cut.npy", full.substr(0, 3));
  expect_error<InvalidArgument>([&] { load_npy(path("cut.npy")); }, {path("cut.npy"), "not a .npy file"});
  for (size_t cut : {size_t{9}, size_t{60}, full.size() - 1}) {
    write_bytes("cut.npy", full.substr(0, cut));
    expect_error<IOError>([&] { load_npy(path("cut.npy")); }, {path("cut.npy"), "truncated"});
  }
  write_bytes("cut.npy", full.substr(0, full.size() - 8));
  expect_error<IOError>([&] { load_npy(path("cut.npy")); }, {"double[4, 4]", "128 bytes", "120 bytes"});
}

TEST_F(NpyFiles, GarbageAndMissingFilesNameTheFile) {
  write_bytes("junk.npy", "this is not numpy at all");
  std::string msg = error_message<InvalidArgument>([&] { load_npy(path("junk.npy")); });
  EXPECT_TRUE(has(msg, path("junk.npy")) && has(msg, "not a .npy file")) << msg;

  write_bytes("bad.npy", make_npy("{'descr': '<f4', 'shape': (2, 3)", std::string(24, '\0')));
  msg = error_message<InvalidArgument>([&] { load_npy(path("bad.npy")); });
  EXPECT_TRUE(has(msg, path("bad.npy")) && has(msg, "malformed")) << msg;

  write_bytes("nodescr.npy", make_npy("{'fortran_order': False, 'shape': (2,), }", std::string(8, '\0')));
  msg = error_message<InvalidArgument>([&] { load_npy(path("nodescr.npy")); });
  EXPECT_TRUE(has(msg, "lacks 'descr'")) << msg;

  write_bytes("long.npy", serialize_npy(Tensor::zeros(DType::Int8, {3})) + "xx");
  msg = error_message<InvalidArgument>([&] { load_npy(path("long.npy")); });
  EXPECT_TRUE(has(msg, "2 unexpected bytes")) << msg;

  msg = error_message<IOError>([&] { load_npy(path("absent.npy")); });
  EXPECT_TRUE(has(msg, path("absent.npy"))) << msg;
}

}  // namespace
}  // namespace kiln
