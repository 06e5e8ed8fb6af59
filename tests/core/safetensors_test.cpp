#include "kiln/safetensors.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_bytes(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  kiln::test::TempDir dir_;
};

using kiln::test::error_message;
using kiln::test::expect_error;
using kiln::test::has;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file from a literal header (unpadded) and data bytes: what corruption tests start from.
std::string make_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// A tensor of dtype `dtype` whose bytes are a pattern depending on `seed` (valid bools only).
Tensor patterned(DType dtype, const Shape& shape, int seed) {
  Tensor t = Tensor::empty(dtype, shape);
  auto* p = static_cast<unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i)
    p[i] = dtype == DType::Bool ? static_cast<unsigned char>((i + static_cast<size_t>(seed)) % 2)
                                : static_cast<unsigned char>(i * 7 + static_cast<size_t>(seed) * 13 + 1);
  return t;
}

constexpr DType kAllDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64,
                                DType::Int32,   DType::Int16,   DType::Int8,    DType::Uint64,   DType::Uint32,
                                DType::Uint16,  DType::Uint8,   DType::Bool};

TEST_F(Safetensors, RoundTripEveryDTypeWithScalarsAndEmptyTensors) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  int seed = 0;
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{2, 3}, Shape{}, Shape{0}, Shape{3, 0, 2}, Shape{5}}) {
      tensors.emplace_back(fmt::format("{}.{}", safetensors_dtype_name(dtype), to_string(shape)),
                           patterned(dtype, shape, seed++));
    }
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode \"quoted\"\n"}, {"", ""}};
  write_safetensors(path("all.safetensors"), tensors, metadata);
  const std::string serialized = serialize_safetensors(tensors, metadata);
  std::ifstream in(path("all.safetensors"), std::ios::binary);
  const std::string on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(on_disk, serialized);

  for (const SafetensorsFile& f : {read_safetensors(path("all.safetensors")), parse_safetensors(serialized, "mem")}) {
    EXPECT_EQ(f.metadata, metadata);
    ASSERT_EQ(f.tensors.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      SCOPED_TRACE(tensors[i].first);
      EXPECT_EQ(f.tensors[i].first, tensors[i].first);  // written order = data-offset order
      EXPECT_EQ(f.tensors[i].second.dtype(), tensors[i].second.dtype());
      EXPECT_EQ(f.tensors[i].second.shape(), tensors[i].second.shape());
      EXPECT_EQ(bytes_of(f.tensors[i].second), bytes_of(tensors[i].second));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(f.tensors[i].second.raw_data()) % dtype_size(tensors[i].second.dtype()),
                0u);
    }
  }
}

TEST_F(Safetensors, DTypeNames) {
  for (DType dtype : kAllDTypes) EXPECT_EQ(dtype_from_safetensors_name(safetensors_dtype_name(dtype)), dtype);
  EXPECT_EQ(safetensors_dtype_name(DType::BFloat16), "BF16");
  EXPECT_EQ(safetensors_dtype_name(DType::Bool), "BOOL");
  EXPECT_EQ(safetensors_dtype_name(DType::Uint64), "U64");
  expect_error<CorruptFile>([] { dtype_from_safetensors_name("float32"); }, "'float32'");
  expect_error<Unsupported>([] { dtype_from_safetensors_name("F8_E4M3"); }, "F8_E4M3");
}

TEST_F(Safetensors, ExactByteLayout) {
  const std::vector<std::pair<std::string, Tensor>> tensors = {{"b", Tensor::from_vector<float>({2}, {1.0f, -2.0f})},
                                                               {"a", Tensor::scalar<int64_t>(7)}};
  const std::string bytes = serialize_safetensors(tensors, {{"k", "v"}});
  // Metadata first, then the tensors in the given order (not sorted by name), compact JSON.
  const std::string json = R"({"__metadata__":{"k":"v"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("a":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})";
  const size_t padded = (8 + json.size() + 7) / 8 * 8 - 8;  // the data starts 8-byte aligned
  ASSERT_EQ(json.size(), 132u);
  ASSERT_EQ(padded, 136u);  // 4 spaces of padding
  ASSERT_EQ(bytes.size(), 8 + padded + 16);
  EXPECT_EQ(bytes.substr(0, 8), le64(padded));
  EXPECT_EQ(bytes.substr(8, json.size()), json);
  EXPECT_EQ(bytes.substr(8 + json.size(), padded - json.size()), std::string(padded - json.size(), ' '));
  const float f[2] = {1.0f, -2.0f};
  const int64_t i = 7;
  EXPECT_EQ(bytes.substr(8 + padded, 8), std::string(reinterpret_cast<const char*>(f), 8));
  EXPECT_EQ(bytes.substr(8 + padded + 8, 8), std::string(reinterpret_cast<const char*>(&i), 8));

  // With no tensors and no metadata: "{}" padded to 8 bytes.
  EXPECT_EQ(serialize_safetensors({}), le64(8) + "{}      ");
  EXPECT_TRUE(parse_safetensors(serialize_safetensors({}), "empty").tensors.empty());
}

TEST_F(Safetensors, ReadsViewsOfOneBufferAndRealignsPackedTensors) {
  // A 1-element F16 first puts the F32 at data offset 2: it must come back aligned and correct.
  const std::string header =
      R"({"h":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"f":{"dtype":"F32","shape":[2],"data_offsets":[2,10]},)"
      R"("g":{"dtype":"F32","shape":[1],"data_offsets":[10,14]}})";
  std::string data(14, '\0');
  const uint16_t h = float_to_half(1.5f).bits;
  const float fv[3] = {3.25f, -1.0f, 8.0f};
  std::memcpy(data.data(), &h, 2);
  std::memcpy(data.data() + 2, fv, 12);
  std::string padded_header = header + std::string((8 - (8 + header.size()) % 8) % 8, ' ');
  write_bytes("packed.safetensors", make_file(padded_header, data));
  const SafetensorsFile f = read_safetensors(path("packed.safetensors"));
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.tensors[0].second.item_as_double(0), 1.5);
  EXPECT_EQ(f.tensors[1].second.data<float>()[0], 3.25f);
  EXPECT_EQ(f.tensors[1].second.data<float>()[1], -1.0f);
  EXPECT_EQ(f.tensors[2].second.data<float>()[0], 8.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.tensors[1].second.raw_data()) % 4, 0u);

  // An aligned file: every tensor views the one buffer the file was read into.
  write_safetensors(path("aligned.safetensors"),
                    {{"x", Tensor::from_vector<float>({2}, {1, 2})}, {"y", Tensor::from_vector<double>({1}, {3})}});
  const SafetensorsFile g = read_safetensors(path("aligned.safetensors"));
  EXPECT_EQ(g.tensors[0].second.storage(), g.tensors[1].second.storage());
  EXPECT_EQ(g.tensors[1].second.data<double>()[0], 3.0);
}

TEST_F(Safetensors, WritesStridedTensorsPackedAndLeavesNoTemporary) {
  const Tensor x = Tensor::from_vector<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6}).permute({1, 0});
  write_safetensors(path("t.safetensors"), {{"xt", x}});
  const SafetensorsFile f = read_safetensors(path("t.safetensors"));
  EXPECT_EQ(f.tensors[0].second.shape(), (Shape{3, 2}));
  EXPECT_EQ(f.tensors[0].second.to_int64_vector(), (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_.path())) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"t.safetensors"});
}

TEST_F(Safetensors, WriterRejectsBadNamesAndTensors) {
  const Tensor t = Tensor::scalar<float>(1);
  expect_error<InvalidArgument>([&] { serialize_safetensors({{"w", t}, {"w", t}}); }, "'w' is used twice");
  expect_error<InvalidArgument>([&] { write_safetensors(path("x"), {{"__metadata__", t}}); }, "__metadata__");
  expect_error<InvalidArgument>([&] { serialize_safetensors({{"u", Tensor()}}); }, "'u' is undefined");
  expect_error<InvalidArgument>([&] { serialize_safetensors({{"ok", t}}, {{"bad", "\xff\xfe"}}); }, "JSON");
  EXPECT_FALSE(fs::exists(path("x")));
}

TEST_F(Safetensors, MissingFileIsIOErrorNotCorrupt) {
  // Exactly IOError: a missing file is not a corrupt one (CorruptFile).
  expect_error<IOError>([&] { read_safetensors(path("nope.safetensors")); }, {"nope.safetensors", "No such file"});
  expect_error<IOError>([&] { read_safetensors(dir_.path().string()); }, dir_.path().string());
}

// Each case: a malformed file, and fragments its CorruptFile message must contain (the file name
// always; the byte offset or the tensor).
struct CorruptCase {
  const char* label;
  std::string bytes;
  std::vector<std::string> expected;
};

std::vector<CorruptCase> corrupt_cases() {
  const std::string f32x2 = std::string(8, '\1');
  auto one = [](const std::string& info) { return "{\"w\":" + info + "}"; };
  return {
      {"shorter than the length", std::string("\x10\0\0", 3), {"3 bytes", "offset 0"}},
      {"header length past the end", le64(200) + "{}", {"header length at offset 0 is 200", "only 2 bytes follow"}},
      {"header over 100 MB", le64(100'000'001) + std::string(16, ' '), {"100000001", "limit"}},
      {"header not an object", make_file("[1,2]   ", ""), {"offset 8", "'{'"}},
      {"empty header", make_file("", ""), {"offset 8"}},
      {"bad JSON", make_file(R"({"w":{"dtype":"F32",})", ""), {"malformed JSON", "file offset 28"}},
      {"invalid UTF-8", make_file("{\"w\xff\":1}", ""), {"malformed JSON", "file offset 11"}},
      {"missing dtype", make_file(one(R"({"shape":[2],"data_offsets":[0,8]})"), f32x2), {"'w'", "no \"dtype\""}},
      {"missing shape", make_file(one(R"({"dtype":"F32","data_offsets":[0,8]})"), f32x2), {"'w'", "no \"shape\""}},
      {"missing offsets", make_file(one(R"({"dtype":"F32","shape":[2]})"), f32x2), {"'w'", "no \"data_offsets\""}},
      {"extra key",
       make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1})"), f32x2),
       {"'w'", "unexpected key 'x'"}},
      {"entry not an object", make_file(one("3"), ""), {"'w'", "not an object"}},
      {"unknown dtype",
       make_file(one(R"({"dtype":"F31","shape":[2],"data_offsets":[0,8]})"), f32x2),
       {"'w'", "unknown safetensors dtype 'F31'"}},
      {"dtype not a string",
       make_file(one(R"({"dtype":1,"shape":[2],"data_offsets":[0,8]})"), f32x2),
       {"'w'", "dtype"}},
      {"negative dimension",
       make_file(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), f32x2),
       {"'w'", "non-negative integer"}},
      {"fractional dimension",
       make_file(one(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), f32x2),
       {"'w'", "non-negative integer"}},
      {"huge shape",
       make_file(one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"), f32x2),
       {"'w'", "too large"}},
      {"offsets wrong size",
       make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})"), "1234"),
       {"'w'", "hold 4 bytes", "needs 8"}},
      {"offsets reversed",
       make_file(one(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), f32x2),
       {"'w'", "end before"}},
      {"offsets one value",
       make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), f32x2),
       {"'w'", "[begin, end]"}},
      {"offsets past the end",
       make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), "1234"),
       {"'w'", "ends at file offset", "(truncated?)"}},
      {"overlap",
       make_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           f32x2),
       {"'b'", "overlaps tensor 'a'"}},
      {"hole",
       make_file(
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
           std::string(12, '\0')),
       {"belong to no tensor", "before tensor 'b'"}},
      {"hole at the start",
       make_file(one(R"({"dtype":"U8","shape":[1],"data_offsets":[1,2]})"), "ab"),
       {"belong to no tensor"}},
      {"trailing bytes",
       make_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), f32x2 + "xyz"),
       {"3 trailing bytes"}},
      {"duplicate tensor",
       make_file(
           R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
           "ab"),
       {"duplicate key 'w'"}},
      {"duplicate metadata key", make_file(R"({"__metadata__":{"k":"1","k":"2"}})", ""), {"duplicate key 'k'"}},
      {"metadata not strings", make_file(R"({"__metadata__":{"k":1}})", ""), {"'k'", "must be a string"}},
      {"metadata not an object", make_file(R"({"__metadata__":[]})", ""), {"__metadata__", "object"}},
  };
}

TEST_F(Safetensors, EveryCorruptionIsCorruptFileNamingFileAndPlace) {
  const std::vector<CorruptCase> cases = corrupt_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    const CorruptCase& c = cases[i];
    SCOPED_TRACE(c.label);
    const std::string name = "bad-" + std::to_string(i) + ".safetensors";
    write_bytes(name, c.bytes);
    const std::string message = error_message<CorruptFile>([&] { read_safetensors(path(name)); });
    EXPECT_TRUE(has(message, path(name))) << message;
    for (const std::string& part : c.expected) EXPECT_TRUE(has(message, part)) << message << "\nlacks: " << part;
    expect_error<CorruptFile>([&] { parse_safetensors(c.bytes, "label-x"); }, "'label-x'");
  }
}

TEST_F(Safetensors, ForeignDTypeIsUnsupportedNamingTensor) {
  const std::string bytes = make_file(R"({"q":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[0,2]}})", "ab");
  expect_error<Unsupported>([&] { parse_safetensors(bytes, "f8.safetensors"); }, {"f8.safetensors", "'q'"});
}

TEST_F(Safetensors, EveryTruncationIsCorruptFile) {
  const std::string full = serialize_safetensors({{"w", Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4})},
                                                  {"s", Tensor::scalar<int64_t>(-1)},
                                                  {"e", Tensor::empty(DType::Float16, {0, 3})},
                                                  {"b", Tensor::from_vector<uint8_t>({3}, {1, 2, 3})}},
                                                 {{"format", "kiln.checkpoint"}});
  ASSERT_NO_THROW(parse_safetensors(full, "full"));
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string prefix = full.substr(0, n);
    SCOPED_TRACE("truncated to " + std::to_string(n) + " of " + std::to_string(full.size()) + " bytes");
    expect_error<CorruptFile>([&] { parse_safetensors(prefix, "cut.safetensors"); }, "'cut.safetensors'");
  }
  // And through the file reader for a few cut points, including inside the header and the data.
  for (size_t n : {size_t{0}, size_t{7}, size_t{8}, size_t{40}, full.size() - 1}) {
    write_bytes("cut.safetensors", full.substr(0, n));
    EXPECT_THROW(read_safetensors(path("cut.safetensors")), CorruptFile) << n;
  }
}

TEST_F(Safetensors, ReadsWhatTheReferenceWriterProduces) {
  // Produced by huggingface safetensors' save_file({"a": np.array([[1, 2]], np.float32), "b":
  // np.array(3, np.int16)}, metadata={"m": "x"}): sorted by dtype alignment then name, header padded.
  const std::string header = R"({"__metadata__":{"m":"x"},"a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"I16","shape":[],"data_offsets":[8,10]}})";
  std::string data(10, '\0');
  const float a[2] = {1, 2};
  const int16_t b = 3;
  std::memcpy(data.data(), a, 8);
  std::memcpy(data.data() + 8, &b, 2);
  const std::string padded = header + std::string((8 - (8 + header.size()) % 8) % 8, ' ');
  const SafetensorsFile f = parse_safetensors(make_file(padded, data), "ref");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.metadata.at("m"), "x");
  EXPECT_EQ(f.tensors[0].second.shape(), (Shape{1, 2}));
  EXPECT_EQ(f.tensors[0].second.data<float>()[1], 2.0f);
  EXPECT_EQ(f.tensors[1].second.shape(), Shape{});
  EXPECT_EQ(f.tensors[1].second.data<int16_t>()[0], 3);
}

}  // namespace
}  // namespace kiln
