// Issue 16's findings in core, each fed the exact bad input: F1 shape arithmetic that wraps int64,
// F2 JSON nested deep enough to overflow a recursive reader, F6 files that never end or block on
// open, F8 a zip archive with two members of one name.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "core/file_io.h"
#include "core/json_text.h"
#include "core/zip.h"
#include "kiln/error.h"
#include "kiln/safetensors.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"
#include "kiln/trainer_state.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;
using kiln::test::TempDir;

constexpr int64_t k2to32 = int64_t{1} << 32;

TEST(BadInputF1, NumelThatWrapsInt64IsAShapeError) {
  expect_error<ShapeError>([] { numel({k2to32, k2to32}); }, "more elements than a 64-bit count holds");
  // [16, 2^60 + 5] wraps to 80 elements in int64 arithmetic: it must not pass for 80.
  expect_error<ShapeError>([] { numel({16, (int64_t{1} << 60) + 5}); }, "[16, 1152921504606846981]");
  expect_error<ShapeError>([] { contiguous_strides({k2to32, k2to32, 2}); }, "more elements");
  expect_error<ShapeError>([] { numel({3, -2}); }, "negative dimension");
  EXPECT_EQ(numel({k2to32, 2}), k2to32 * 2);
  EXPECT_EQ(numel({}), 1);
  EXPECT_EQ(numel({0, k2to32, k2to32, k2to32}), 0);  // an empty tensor is fine whatever the other dims
}

TEST(BadInputF1, TensorsOverTheByteLimitAreRefusedBeforeAllocating) {
  expect_error<ShapeError>(
      [] {
        Tensor::empty(DType::Float32, {int64_t{1} << 40, 1 << 10});
      },
      "more than Kiln's limit");
  expect_error<ShapeError>([] { Tensor::zeros(DType::Float32, {k2to32, k2to32}); }, "64-bit count");
  float x = 0;
  expect_error<ShapeError>([&] { Tensor::wrap(&x, DType::Float32, {k2to32, k2to32}); }, "64-bit count");
  EXPECT_EQ(checked_bytes({2, 3}, 4), 24u);
}

TEST(BadInputF1, CheckedArithmeticNamesWhatOverflowed) {
  expect_error<ShapeError>([] { checked_mul(k2to32, k2to32, "Reshape: the target's element count"); },
                           "Reshape: the target's element count: 4294967296 * 4294967296");
  expect_error<ShapeError>([] { checked_add(INT64_MAX, 1, "an offset"); }, "an offset");
  EXPECT_EQ(checked_mul(3, 4, "x"), 12);
}

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(BadInputF2, DeeplyNestedJsonIsACorruptFile) {
  expect_error<CorruptFile>([] { check_json_limits(nested(100000), "scheduler.json"); },
                            "scheduler.json: the JSON nests deeper than 200 levels");
  check_json_limits(nested(200), "ok.json");
  // Brackets inside strings do not nest, escaped quotes do not end a string.
  check_json_limits("{\"a\": \"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"}", "s.json");
  EXPECT_EQ(parse_json("{\"a\": [1, 2]}", "x")["a"][1], 2);
  expect_error<CorruptFile>([] { parse_json("{\"a\": ", "trainer_state.json"); }, "trainer_state.json: malformed");
}

TEST(BadInputF2, SafetensorsWithA100kLevelHeaderIsACorruptFile) {
  TempDir dir;
  const std::string header = "{\"__metadata__\": {\"x\": " + nested(100000) + "}}";
  std::ofstream f(dir / "model.safetensors", std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  f.close();
  expect_error<CorruptFile>([&] { read_safetensors((dir / "model.safetensors").string()); },
                            "nests deeper than 200 levels");
}

TEST(BadInputF6, DevicesAndFifosAreRefusedAtOpen) {
  expect_error<IOError>([] { read_file_bytes("/dev/zero", "model"); },
                        "cannot read model '/dev/zero': it is a character device, not a regular file");
  TempDir dir;
  const std::string fifo = (dir / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Without O_NONBLOCK this open would wait for a writer forever.
  expect_error<IOError>([&] { read_file_bytes(fifo, "IDX file"); }, "it is a FIFO, not a regular file");
}

TEST(BadInputF6, AFileOverTheLimitIsRefusedBeforeReading) {
  TempDir dir;
  std::ofstream(dir / "big.onnx") << std::string(4096, 'x');
  expect_error<IOError>([&] { read_file_bytes((dir / "big.onnx").string(), "model", 1000); },
                        "it is 4096 bytes, more than the limit of 1000 bytes");
  EXPECT_EQ(read_file_bytes((dir / "big.onnx").string(), "model", 4096).size(), 4096u);
}

// A stored (uncompressed) zip with the given member names, each holding "x".
std::string zip_with(const std::vector<std::string>& names) {
  std::string out, dir;
  auto u16 = [](std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); };
  auto u32 = [](std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); };
  const uint32_t crc_of_x = 0x8CDC1683;
  for (const auto& name : names) {
    const auto offset = static_cast<uint32_t>(out.size());
    u32(out, 0x04034b50), u16(out, 20), u16(out, 0), u16(out, 0), u16(out, 0), u16(out, 0);
    u32(out, crc_of_x), u32(out, 1), u32(out, 1), u16(out, static_cast<uint16_t>(name.size())), u16(out, 0);
    out += name + "x";
    u32(dir, 0x02014b50), u16(dir, 20), u16(dir, 20), u16(dir, 0), u16(dir, 0), u16(dir, 0), u16(dir, 0);
    u32(dir, crc_of_x), u32(dir, 1), u32(dir, 1), u16(dir, static_cast<uint16_t>(name.size())), u16(dir, 0);
    u16(dir, 0), u16(dir, 0), u16(dir, 0), u32(dir, 0), u32(dir, offset);
    dir += name;
  }
  const auto dir_offset = static_cast<uint32_t>(out.size());
  out += dir;
  u32(out, 0x06054b50), u16(out, 0), u16(out, 0), u16(out, static_cast<uint16_t>(names.size()));
  u16(out, static_cast<uint16_t>(names.size())), u32(out, static_cast<uint32_t>(dir.size())), u32(out, dir_offset);
  u16(out, 0);
  return out;
}

TEST(BadInputF8, AZipWithTwoMembersOfOneNameIsACorruptFile) {
  TempDir dir;
  std::ofstream(dir / "ok.npz", std::ios::binary) << zip_with({"a.npy", "b.npy"});
  EXPECT_EQ(ZipArchive((dir / "ok.npz").string()).members().size(), 2u);
  std::ofstream(dir / "twice.npz", std::ios::binary) << zip_with({"a.npy", "a.npy"});
  expect_error<CorruptFile>([&] { ZipArchive((dir / "twice.npz").string()); },
                            "the zip archive has two members named 'a.npy'");
}

// Found by fuzz/trainer_state_fuzz.cpp under UBSan: nlohmann's get<int64_t>() of 2e47 is a C++
// conversion out of range (undefined behaviour). Numbers from files go through json_int64,
// json_uint64 and json_float, which refuse what does not fit.
TEST(BadInputF2, JsonNumbersOutsideTheirTypeAreCorruptFile) {
  using nlohmann::json;
  EXPECT_EQ(json_int64(json(-3), "n"), -3);
  EXPECT_EQ(json_int64(json(2.0), "n"), 2);
  EXPECT_EQ(json_int64(json(-0x1p63), "n"), INT64_MIN);
  EXPECT_EQ(json_int64(json(uint64_t{INT64_MAX}), "n"), INT64_MAX);
  for (const json& bad : {json(2e47), json(0x1p63), json(uint64_t{1} << 63), json(1.5), json("3"), json(nullptr)})
    expect_error<CorruptFile>([&] { json_int64(bad, "'x.json': eval_steps"); },
                              {"'x.json': eval_steps must be an integer of 64 bits, not " + bad.dump()});
  EXPECT_EQ(json_uint64(json(0x1p63), "n"), uint64_t{1} << 63);
  for (const json& bad : {json(-1), json(0x1p64), json(-0.0 - 1)})
    expect_error<CorruptFile>([&] { json_uint64(bad, "runs"); }, "runs must be a non-negative integer of 64 bits");
  EXPECT_EQ(json_float(json(0.25), "lr"), 0.25f);
  expect_error<CorruptFile>([&] { json_float(json(1e300), "lr"); }, "lr must be a number within float's range");
  expect_error<CorruptFile>([&] { json_float(json("0.1"), "lr"); }, "lr must be a number, not \"0.1\"");
}

TEST(BadInputF2, TrainerStateWithAnOutOfRangeStepIsCorruptFile) {
  nlohmann::json j = trainer::TrainerState().to_json();
  j["eval_steps"] = 2e47;
  expect_error<CorruptFile>([&] { trainer::TrainerState::from_json(j); },
                            "trainer state: eval_steps must be an integer of 64 bits, not 2e+47");
}

}  // namespace
}  // namespace kiln
