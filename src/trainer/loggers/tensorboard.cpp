// TensorBoard event files written by hand: protobuf wire format for tensorflow.Event /
// Summary / Summary.Value, framed as TFRecords with masked CRC32C. Field numbers come from
// tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; TensorProto tensor = 8; SummaryMetadata metadata = 9; }
//   SummaryMetadata { PluginData plugin_data = 1; }   PluginData { string plugin_name = 1; bytes content = 2; }
//   TensorProto { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2; repeated bytes string_val = 8;
//   } TensorShapeProto { repeated Dim dim = 2; }   Dim { int64 size = 1; }
#include "kiln/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "kiln/error.h"

namespace kiln::trainer {
namespace {

// Byte-at-a-time table for the reflected Castagnoli polynomial, built at compile time.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Protobuf wire types used by the three messages.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (uint64_t{field} << 3) | type); }

template <class UInt>
void put_little_endian(std::string& out, UInt v) {
  for (size_t i = 0; i < sizeof(UInt); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, uint32_t field, double v) {
  put_key(out, field, kFixed64);
  put_little_endian(out, std::bit_cast<uint64_t>(v));
}

void put_float(std::string& out, uint32_t field, float v) {
  put_key(out, field, kFixed32);
  put_little_endian(out, std::bit_cast<uint32_t>(v));
}

// int64 fields are varints of the two's-complement value (10 bytes when negative).
void put_int64(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf.data();
}

// Like TensorFlow's global uid: writers opened by one process in the same second get distinct names.
std::atomic<uint64_t> g_writer_count{0};

std::string event_file_name() {
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return fmt::format("events.out.tfevents.{:010d}.{}.{}.{}", seconds, host_name(), static_cast<long>(getpid()),
                     g_writer_count.fetch_add(1));
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) crc = kCrc32cTable[(crc ^ c) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;  // unsigned: wraps modulo 2^32
}

void TensorBoardWriter::FileCloser::operator()(std::FILE* f) const {
  if (f) std::fclose(f);
}

TensorBoardWriter::TensorBoardWriter(const std::string& logdir) {
  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  if (ec || !std::filesystem::is_directory(logdir)) {
    throw IOError(fmt::format("TensorBoard: cannot create the log folder '{}': {}", logdir,
                              ec ? ec.message() : "a file of that name is in the way"));
  }
  path_ = (std::filesystem::path(logdir) / event_file_name()).string();
  file_.reset(std::fopen(path_.c_str(), "wb"));
  if (!file_) throw IOError(fmt::format("TensorBoard: cannot create '{}': {}", path_, std::strerror(errno)));
  std::string event;
  put_double(event, 1, now_seconds());
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fflush(file_.get());  // errors cannot be reported from a destructor
}

TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&&) noexcept = default;
TensorBoardWriter& TensorBoardWriter::operator=(TensorBoardWriter&&) noexcept = default;

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step,
                                   std::optional<double> wall_time) {
  if (tag.empty())
    throw InvalidArgument(fmt::format("TensorBoard: empty tag for a scalar at step {} ({})", step, path_));
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_float(summary_value, 2, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event;
  put_double(event, 1, wall_time.value_or(now_seconds()));
  put_int64(event, 2, step);
  put_bytes(event, 5, summary);
  write_record(event);
}

void TensorBoardWriter::add_text(const std::string& tag, const std::string& text, int64_t step,
                                 std::optional<double> wall_time) {
  if (tag.empty()) throw InvalidArgument(fmt::format("TensorBoard: empty tag for a text at step {} ({})", step, path_));
  // As torch.utils.tensorboard's text(): tag "<tag>/text_summary", the text plugin, a [1] string tensor.
  std::string plugin_data;
  put_bytes(plugin_data, 1, "text");
  std::string metadata;
  put_bytes(metadata, 1, plugin_data);
  std::string dim, shape, tensor;
  put_int64(dim, 1, 1);
  put_bytes(shape, 2, dim);
  put_int64(tensor, 1, 7);
  put_bytes(tensor, 2, shape);
  put_bytes(tensor, 8, text);
  std::string summary_value;
  put_bytes(summary_value, 1, tag + "/text_summary");
  put_bytes(summary_value, 8, tensor);
  put_bytes(summary_value, 9, metadata);
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event;
  put_double(event, 1, wall_time.value_or(now_seconds()));
  put_int64(event, 2, step);
  put_bytes(event, 5, summary);
  write_record(event);
}

void TensorBoardWriter::write_record(const std::string& event) {
  if (!file_) throw IOError(fmt::format("TensorBoard: writer for '{}' was moved from", path_));
  std::string record;
  record.reserve(event.size() + 16);
  put_little_endian(record, uint64_t{event.size()});
  put_little_endian(record, masked_crc32c(std::string_view(record).substr(0, 8)));
  record.append(event);
  put_little_endian(record, masked_crc32c(event));
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size()) {
    throw IOError(fmt::format("TensorBoard: cannot write to '{}': {}", path_, std::strerror(errno)));
  }
}

void TensorBoardWriter::flush() {
  if (!file_) throw IOError(fmt::format("TensorBoard: writer for '{}' was moved from", path_));
  if (std::fflush(file_.get()) != 0 || fsync(fileno(file_.get())) != 0) {
    throw IOError(fmt::format("TensorBoard: cannot flush '{}': {}", path_, std::strerror(errno)));
  }
}

}  // namespace kiln::trainer
