#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "data/idx.h"

namespace kiln {
namespace {

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

std::string temp_file(const std::string& name, const std::string& bytes) {
  const auto path = std::filesystem::temp_directory_path() / ("kiln_idx_test_" + name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

TEST(Idx, ReadsFashionMnistTestSet) {
  const Tensor images = read_idx(kFashion + "/t10k-images-idx3-ubyte.gz");
  const Tensor labels = read_idx(kFashion + "/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(images.shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(labels.shape(), (Shape{10000}));
  // Each of the 10 classes has exactly 1,000 test images.
  std::vector<int> counts(10, 0);
  for (int64_t i = 0; i < labels.numel(); ++i) ++counts.at(labels.data<uint8_t>()[i]);
  for (int c : counts) EXPECT_EQ(c, 1000);
  // The first test image is an ankle boot (class 9), as in every Fashion-MNIST loader.
  EXPECT_EQ(labels.data<uint8_t>()[0], 9);
}

TEST(Idx, ReadsBigEndianInt32PlainFile) {
  // magic 0x00000C01 (int32, rank 1), dim 2, values 1 and -2 big-endian.
  const std::string bytes("\x00\x00\x0C\x01\x00\x00\x00\x02\x00\x00\x00\x01\xFF\xFF\xFF\xFE", 16);
  const Tensor t = read_idx(temp_file("i32.idx", bytes));
  ASSERT_EQ(t.dtype(), DType::Int32);
  EXPECT_EQ(t.data<int32_t>()[0], 1);
  EXPECT_EQ(t.data<int32_t>()[1], -2);
}

void expect_error(const std::string& path, const std::string& fragment) {
  try {
    read_idx(path);
    FAIL() << "no error for " << path;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Idx, BadFilesAreClearErrors) {
  expect_error("/nonexistent/t10k.gz", "cannot open IDX file '/nonexistent/t10k.gz'");
  expect_error(temp_file("garbage.idx", "hello world"), "is not an IDX file");
  const std::string truncated("\x00\x00\x08\x01\x00\x00\x00\x09\x01\x02", 10);
  expect_error(temp_file("short.idx", truncated), "header says 9 bytes of data for shape [9], file has 2");
  // A gzip stream cut short.
  std::ifstream in(kFashion + "/t10k-labels-idx1-ubyte.gz", std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  expect_error(temp_file("cut.gz", gz.substr(0, gz.size() / 2)), "cut.gz' is truncated or corrupt");
}

}  // namespace
}  // namespace kiln
