// TensorBoardWriter: CRC32C against published check values (the CRC catalogue's "123456789" and
// RFC 3720's iSCSI vectors), the TFRecord mask, and event files read back by a small reader written
// here from the format (framing, both CRCs, Event/Summary/Value fields; floats compared exactly).
// tests/python/test_tensorboard.py decodes the file of TensorBoardDump.Write with python3-protobuf
// and python3-crc32c.
#include "kiln/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

#include "kiln/error.h"
#include "test_util.h"

namespace kiln::trainer {
namespace {

namespace fs = std::filesystem;
using kiln::test::expect_error;
using kiln::test::TempDir;

// ---- a reader written from the spec, independent of the writer's encoding helpers ----

uint64_t read_le(const std::string& s, size_t at, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(s.at(at + i))} << (8 * i);
  return v;
}

uint64_t read_varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    const auto byte = static_cast<unsigned char>(s.at(at++));
    v |= uint64_t{byte & 0x7Fu} << shift;
    if (!(byte & 0x80)) return v;
  }
  ADD_FAILURE() << "varint longer than 10 bytes";
  return v;
}

struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t scalar = 0;  // varint, fixed64 or fixed32 payload
  std::string bytes;    // length-delimited payload
};

std::vector<Field> parse_message(const std::string& s) {
  std::vector<Field> fields;
  size_t at = 0;
  while (at < s.size()) {
    Field f;
    const uint64_t key = read_varint(s, at);
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire_type = static_cast<uint32_t>(key & 7);
    switch (f.wire_type) {
      case 0:
        f.scalar = read_varint(s, at);
        break;
      case 1:
        f.scalar = read_le(s, at, 8);
        at += 8;
        break;
      case 5:
        f.scalar = read_le(s, at, 4);
        at += 4;
        break;
      case 2: {
        const uint64_t n = read_varint(s, at);
        f.bytes = s.substr(at, n);
        EXPECT_EQ(f.bytes.size(), n) << "truncated length-delimited field " << f.number;
        at += n;
        break;
      }
      default:
        ADD_FAILURE() << "unexpected wire type " << f.wire_type;
        return fields;
    }
    fields.push_back(f);
  }
  EXPECT_EQ(at, s.size());
  return fields;
}

struct Event {
  std::optional<double> wall_time;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;  // (tag, simple_value)
};

Event decode_event(const std::string& data) {
  Event e;
  for (const Field& f : parse_message(data)) {
    if (f.number == 1 && f.wire_type == 1) e.wall_time = std::bit_cast<double>(f.scalar);
    else if (f.number == 2 && f.wire_type == 0) e.step = static_cast<int64_t>(f.scalar);
    else if (f.number == 3 && f.wire_type == 2) e.file_version = f.bytes;
    else if (f.number == 5 && f.wire_type == 2) {
      for (const Field& v : parse_message(f.bytes)) {
        EXPECT_EQ(v.number, 1u);
        EXPECT_EQ(v.wire_type, 2u);
        std::string tag;
        std::optional<float> simple;
        for (const Field& g : parse_message(v.bytes)) {
          if (g.number == 1 && g.wire_type == 2) tag = g.bytes;
          else if (g.number == 2 && g.wire_type == 5) simple = std::bit_cast<float>(static_cast<uint32_t>(g.scalar));
          else ADD_FAILURE() << "unexpected Value field " << g.number;
        }
        EXPECT_TRUE(simple.has_value()) << tag;
        e.values.emplace_back(tag, simple.value_or(0.f));
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << f.number << " wire type " << f.wire_type;
    }
  }
  return e;
}

uint64_t mask(uint32_t crc) { return uint32_t{((crc >> 15) | (crc << 17)) + 0xa282ead8u}; }

// Every record of the file, its framing and CRCs checked.
std::vector<Event> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  std::vector<Event> events;
  size_t at = 0;
  while (at < s.size()) {
    EXPECT_LE(at + 12, s.size()) << "truncated record header";
    if (at + 12 > s.size()) break;
    const uint64_t length = read_le(s, at, 8);
    EXPECT_EQ(read_le(s, at + 8, 4), mask(crc32c(s.substr(at, 8)))) << "length CRC";
    EXPECT_LE(at + 12 + length + 4, s.size()) << "truncated record";
    if (at + 12 + length + 4 > s.size()) break;
    const std::string data = s.substr(at + 12, length);
    EXPECT_EQ(read_le(s, at + 12 + length, 4), mask(crc32c(data))) << "data CRC";
    events.push_back(decode_event(data));
    at += 12 + length + 4;
  }
  return events;
}

// The scalars of TensorBoardDump.Write; test_tensorboard.py holds the same list.
struct Scalar {
  const char* tag;
  double value;
  int64_t step;
  double wall_time;
};
const std::vector<Scalar> kDumpScalars = {
    {"train/loss", 2.302585092994046, 0, 1700000000.5},
    {"train/loss", 0.1, 1, 1700000001.25},
    {"train/learning_rate", 5e-05, 1, 1700000001.25},
    {"eval/accuracy", -3.75, 1099511627776, 1700000002.0},  // step 2^40: a 6-byte varint
    {"train/loss", 1e30, -1, 1700000003.0},                 // negative int64: a 10-byte varint
    {"train/grad_norm", 0.0, 7, 0.0},
};

// ---- tests ----

TEST(TensorBoardCrc, PublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);    // RFC 3720 B.4
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);  // RFC 3720 B.4
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);  // RFC 3720 B.4
}

TEST(TensorBoardCrc, MaskedValue) {
  // crc 0xE3069283: (crc >> 15) = 0x0001C60D, (crc << 17) mod 2^32 = 0x25060000, or = 0x2507C60D,
  // + 0xa282ead8 = 0xC78AB0E5 (no carry out of 32 bits here); the second case wraps.
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
  // crc 0: mask is just the delta.
  EXPECT_EQ(masked_crc32c(""), 0xa282ead8u);
  // crc 0x62A8AB43: rotate = 0x5686C551, + delta = 0xF909B029; crc 0x8A9136AA: rotate 0x6D551522 +
  // 0xa282ead8 = 0x10FD7FFFA -> 0x0FD7FFFA (wraps modulo 2^32).
  EXPECT_EQ(masked_crc32c(std::string(32, '\xff')), 0xF909B029u);
  EXPECT_EQ(masked_crc32c(std::string(32, '\0')), 0x0FD7FFFAu);
}

TEST(TensorBoardWriter, FileNameAndVersionRecord) {
  TempDir tmp;
  const fs::path logdir = tmp / "runs" / "exp1";  // parents are created
  // The writer reads std::chrono::system_clock; ::time() may read a coarser clock: a second of slack.
  const auto now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  const double before = std::floor(now()) - 1;
  std::string path;
  {
    TensorBoardWriter w(logdir.string());
    path = w.path();
  }  // destructor flushes
  const double after = now() + 1;
  EXPECT_EQ(fs::path(path).parent_path(), logdir);
  const std::string name = fs::path(path).filename().string();
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  // events.out.tfevents.<10-digit seconds>.<host>.<pid>.<n>
  ASSERT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  const std::string seconds = name.substr(20, 10);
  EXPECT_EQ(seconds.find_first_not_of("0123456789"), std::string::npos) << name;
  EXPECT_GE(std::stod(seconds), before);
  EXPECT_LE(std::stod(seconds), after);
  const std::string middle = "." + std::string(host) + "." + std::to_string(::getpid()) + ".";
  EXPECT_EQ(name.substr(30, middle.size()), middle) << name;

  const std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  ASSERT_TRUE(events[0].wall_time.has_value());
  EXPECT_GE(*events[0].wall_time, before);
  EXPECT_LE(*events[0].wall_time, after);
  EXPECT_TRUE(events[0].values.empty());
}

TEST(TensorBoardWriter, TwoWritersInOneFolderGetTwoFiles) {
  TempDir tmp;
  TensorBoardWriter a(tmp.path().string()), b(tmp.path().string());
  EXPECT_NE(a.path(), b.path());
}

TEST(TensorBoardWriter, ScalarsReadBack) {
  TempDir tmp;
  TensorBoardWriter w(tmp.path().string());
  for (const Scalar& s : kDumpScalars) w.add_scalar(s.tag, s.value, s.step, s.wall_time);
  const double before = static_cast<double>(::time(nullptr));
  w.add_scalar("default/wall_time", 1.5, 3);
  const double after = static_cast<double>(::time(nullptr)) + 1;
  w.flush();  // readable without closing the writer
  const std::vector<Event> events = read_events(w.path());
  ASSERT_EQ(events.size(), kDumpScalars.size() + 2);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  for (size_t i = 0; i < kDumpScalars.size(); ++i) {
    const Event& e = events[i + 1];
    const Scalar& s = kDumpScalars[i];
    EXPECT_EQ(e.wall_time, s.wall_time) << i;
    EXPECT_EQ(e.step, s.step) << i;
    EXPECT_EQ(e.file_version, "") << i;
    ASSERT_EQ(e.values.size(), 1u) << i;
    EXPECT_EQ(e.values[0].first, s.tag) << i;
    EXPECT_EQ(e.values[0].second, static_cast<float>(s.value)) << i;  // exact: stored as float32
  }
  const Event& last = events.back();
  EXPECT_EQ(last.step, 3);
  ASSERT_TRUE(last.wall_time.has_value());
  EXPECT_GE(*last.wall_time, before);
  EXPECT_LE(*last.wall_time, after);
}

TEST(TensorBoardWriter, NonFiniteValues) {
  TempDir tmp;
  TensorBoardWriter w(tmp.path().string());
  w.add_scalar("inf", std::numeric_limits<double>::infinity(), 1, 1.0);
  w.add_scalar("nan", std::numeric_limits<double>::quiet_NaN(), 2, 1.0);
  w.add_scalar("overflow", 1e300, 3, 1.0);  // beyond float: +inf, as a float cast gives
  w.flush();
  const std::vector<Event> events = read_events(w.path());
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].values.at(0).second, std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(events[2].values.at(0).second));
  EXPECT_EQ(events[3].values.at(0).second, std::numeric_limits<float>::infinity());
}

TEST(TensorBoardWriter, Errors) {
  TempDir tmp;
  fs::create_directories(tmp.path());
  const fs::path blocker = tmp / "not_a_folder";
  std::ofstream(blocker) << "x";
  expect_error<IOError>([&] { TensorBoardWriter w(blocker.string()); }, blocker.string());
  expect_error<IOError>([&] { TensorBoardWriter w((blocker / "sub").string()); }, (blocker / "sub").string());

  TensorBoardWriter w((tmp / "ok").string());
  expect_error<InvalidArgument>([&] { w.add_scalar("", 1.0, 4); }, {"empty tag", w.path()});
}

// Writes the scalars of kDumpScalars to $KILN_TB_DUMP (for test_tensorboard.py) or, when unset, to
// a temporary folder, and checks the file there with the reader above either way.
TEST(TensorBoardDump, Write) {
  TempDir tmp;
  const char* env = std::getenv("KILN_TB_DUMP");
  const fs::path dir = env && *env ? fs::path(env) : tmp.path();
  std::string path;
  {
    TensorBoardWriter w(dir.string());
    for (const Scalar& s : kDumpScalars) w.add_scalar(s.tag, s.value, s.step, s.wall_time);
    path = w.path();
  }
  const std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), kDumpScalars.size() + 1);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  for (size_t i = 0; i < kDumpScalars.size(); ++i) {
    EXPECT_EQ(events[i + 1].step, kDumpScalars[i].step);
    ASSERT_EQ(events[i + 1].values.size(), 1u);
    EXPECT_EQ(events[i + 1].values[0].first, kDumpScalars[i].tag);
  }
}

}  // namespace
}  // namespace kiln::trainer
