// .npy reading and writing. Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
// magic "\x93NUMPY", major, minor, header length (2 bytes in 1.0, 4 in 2.0/3.0, little endian), a
// Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded with spaces
// and '\n', then the raw data.
#include "kiln/npy.h"

#include <fmt/format.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "core/atomic_file.h"

namespace kiln {

static_assert(std::endian::native == std::endian::little, "Kiln's .npy I/O assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kHeaderAlign = 64;

struct DescrEntry {
  const char* code;  // NumPy type character and size without the byte-order prefix
  DType dtype;
};
constexpr std::array<DescrEntry, 13> kDescrs = {{
    {"f4", DType::Float32},
    {"f8", DType::Float64},
    {"f2", DType::Float16},
    {"V2", DType::BFloat16},
    {"i8", DType::Int64},
    {"i4", DType::Int32},
    {"i2", DType::Int16},
    {"i1", DType::Int8},
    {"u8", DType::Uint64},
    {"u4", DType::Uint32},
    {"u2", DType::Uint16},
    {"u1", DType::Uint8},
    {"b1", DType::Bool},
}};

// The header dict's values: a string, a bool, or a tuple of ints (all the format uses).
struct HeaderValue {
  enum class Kind { String, Bool, Tuple } kind = Kind::String;
  std::string s;
  bool b = false;
  std::vector<int64_t> ints;
};

// Parses the restricted Python literal NumPy writes; anything else is an InvalidArgument.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& label) : text_(text), label_(label) {}

  std::map<std::string, HeaderValue> parse_dict() {
    std::map<std::string, HeaderValue> out;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      std::string key = parse_string();
      expect(':');
      out[key] = parse_value(key);
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}'");
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the header dict");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument(fmt::format("{}: malformed .npy header ({} at offset {}): {}", label_, what, pos_, text_));
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n')) ++pos_;
  }
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }
  std::string parse_string() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a quoted string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string s = text_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return s;
  }
  int64_t parse_int() {
    skip_space();
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    // Python 2 era writers append 'L' to longs.
    const size_t digits_end = pos_;
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    if (digits_end == start) fail("expected a non-negative integer");
    if (digits_end - start > 18) fail("dimension too large");
    return std::stoll(text_.substr(start, digits_end - start));
  }
  HeaderValue parse_value(const std::string& key) {
    HeaderValue v;
    const char c = peek();
    if (c == '\'' || c == '"') {
      v.s = parse_string();
    } else if (c == '(') {
      v.kind = HeaderValue::Kind::Tuple;
      ++pos_;
      while (peek() != ')') {
        v.ints.push_back(parse_int());
        if (peek() == ',') ++pos_;
        else if (peek() != ')') fail("expected ',' or ')' in the shape");
      }
      ++pos_;
    } else if (text_.compare(pos_, 4, "True") == 0 || text_.compare(pos_, 5, "False") == 0) {
      v.kind = HeaderValue::Kind::Bool;
      v.b = text_[pos_] == 'T';
      pos_ += v.b ? 4 : 5;
    } else if (c == '[') {
      throw Unsupported(
          fmt::format("{}: structured .npy arrays (descr {}) are not supported; save a "
                      "plain array",
                      label_, text_.substr(pos_)));
    } else {
      fail(fmt::format("unexpected value for '{}'", key));
    }
    return v;
  }

  const std::string& text_;
  const std::string& label_;
  size_t pos_ = 0;
};

DType dtype_of_descr(const std::string& descr, const std::string& label) {
  if (descr.size() >= 2) {
    const char order = descr[0];
    const std::string code = descr.substr(1);
    for (const DescrEntry& e : kDescrs) {
      if (code != e.code) continue;
      const bool one_byte = dtype_size(e.dtype) == 1;
      if (order == '>' && !one_byte)
        throw Unsupported(
            fmt::format("{}: big-endian .npy data (descr '{}') is not supported; save it "
                        "little-endian (arr.astype(arr.dtype.newbyteorder('<')))",
                        label, descr));
      // '=' is native order, which is little endian on every host Kiln builds for.
      if (order == '<' || order == '|' || order == '=' || (order == '>' && one_byte)) return e.dtype;
    }
  }
  throw Unsupported(
      fmt::format("{}: .npy dtype '{}' is not supported (Kiln reads float16/32/64, "
                  "bfloat16 as '<V2', int8..64, uint8..64 and bool)",
                  label, descr));
}

struct NpyHeader {
  DType dtype = DType::Float32;
  Shape shape;
  size_t data_offset = 0;  // bytes before the array data
  size_t data_bytes = 0;
};

// The size of the fixed prefix and the header length it declares; `prefix` holds >= 12 bytes or
// the whole file if shorter.
std::pair<size_t, size_t> read_prefix(const std::string& prefix, const std::string& label) {
  if (prefix.size() < kMagicLen || std::memcmp(prefix.data(), kMagic, kMagicLen) != 0)
    throw InvalidArgument(fmt::format("{}: not a .npy file (no \\x93NUMPY magic at the start)", label));
  if (prefix.size() < kMagicLen + 4) throw IOError(fmt::format("{}: truncated .npy header", label));
  const auto major = static_cast<uint8_t>(prefix[6]);
  const auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<uint8_t>(prefix[i])); };
  if (major == 1) return {10, byte(8) | byte(9) << 8};
  if (major == 2 || major == 3) {
    if (prefix.size() < 12) throw IOError(fmt::format("{}: truncated .npy header", label));
    return {12, byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24};
  }
  throw Unsupported(fmt::format("{}: .npy format version {}.{} is not supported (1.0, 2.0 and 3.0 are)", label, major,
                                static_cast<int>(static_cast<uint8_t>(prefix[7]))));
}

NpyHeader parse_header(const std::string& header_text, size_t data_offset, const std::string& label) {
  HeaderParser parser(header_text, label);
  const auto dict = parser.parse_dict();
  const auto get = [&](const char* key, HeaderValue::Kind kind) -> const HeaderValue& {
    auto it = dict.find(key);
    if (it == dict.end()) throw InvalidArgument(fmt::format("{}: .npy header lacks '{}': {}", label, key, header_text));
    if (it->second.kind != kind)
      throw InvalidArgument(fmt::format("{}: .npy header has a bad '{}': {}", label, key, header_text));
    return it->second;
  };
  NpyHeader h;
  h.dtype = dtype_of_descr(get("descr", HeaderValue::Kind::String).s, label);
  h.shape = get("shape", HeaderValue::Kind::Tuple).ints;
  if (get("fortran_order", HeaderValue::Kind::Bool).b && h.shape.size() > 1)
    throw Unsupported(
        fmt::format("{}: Fortran-order .npy arrays are not supported; save with "
                    "np.save(path, np.ascontiguousarray(arr))",
                    label));
  // Guard the element count against overflow before anything is allocated.
  uint64_t elems = 1;
  for (int64_t d : h.shape) {
    if (d != 0 && elems > std::numeric_limits<uint64_t>::max() / 16 / static_cast<uint64_t>(d))
      throw InvalidArgument(fmt::format("{}: .npy shape {} is too large", label, to_string(h.shape)));
    elems *= static_cast<uint64_t>(d);
  }
  h.data_offset = data_offset;
  h.data_bytes = static_cast<size_t>(elems) * dtype_size(h.dtype);
  return h;
}

std::string describe_header(const NpyHeader& h) { return fmt::format("{}{}", dtype_name(h.dtype), to_string(h.shape)); }

void check_data_size(const NpyHeader& h, size_t available, const std::string& label) {
  if (available < h.data_bytes)
    throw IOError(
        fmt::format("{}: truncated .npy file: the header declares {} ({} bytes of data) but "
                    "only {} bytes follow",
                    label, describe_header(h), h.data_bytes, available));
  if (available > h.data_bytes)
    throw InvalidArgument(fmt::format("{}: .npy file has {} unexpected bytes after the {} data of {}", label,
                                      available - h.data_bytes, h.data_bytes, describe_header(h)));
}

// C++ bool must hold 0 or 1; NumPy treats any nonzero byte as True, so normalise.
void normalise_bools(Tensor& t) {
  if (t.dtype() != DType::Bool) return;
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = p[i] != 0;
}

std::string shape_literal(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

}  // namespace

std::string npy_descr(DType dtype) {
  for (const DescrEntry& e : kDescrs)
    if (e.dtype == dtype) return std::string(dtype_size(dtype) == 1 ? "|" : "<") + e.code;
  throw Unsupported(fmt::format("dtype {} has no .npy descr", dtype_name(dtype)));
}

Tensor parse_npy(const std::string& bytes, const std::string& label) {
  const auto [prefix_len, header_len] = read_prefix(bytes.substr(0, 12), label);
  if (bytes.size() < prefix_len + header_len)
    throw IOError(fmt::format("{}: truncated .npy header ({} bytes declared, {} present)", label, header_len,
                              bytes.size() - std::min(bytes.size(), prefix_len)));
  const NpyHeader h = parse_header(bytes.substr(prefix_len, header_len), prefix_len + header_len, label);
  check_data_size(h, bytes.size() - h.data_offset, label);
  Tensor t = Tensor::empty(h.dtype, h.shape);
  if (h.data_bytes) std::memcpy(t.raw_data(), bytes.data() + h.data_offset, h.data_bytes);
  normalise_bools(t);
  return t;
}

Tensor load_npy(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw IOError(fmt::format("{}: no such .npy file", path));
  if (std::filesystem::is_directory(path, ec)) throw IOError(fmt::format("{}: is a directory, not a .npy file", path));
  const auto file_size = static_cast<size_t>(std::filesystem::file_size(path, ec));
  if (ec) throw IOError(fmt::format("{}: cannot stat .npy file: {}", path, ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IOError(fmt::format("{}: cannot open .npy file: {}", path, std::strerror(errno)));

  std::string prefix(std::min<size_t>(12, file_size), '\0');
  in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  const auto [prefix_len, header_len] = read_prefix(prefix, path);
  if (file_size < prefix_len + header_len)
    throw IOError(fmt::format("{}: truncated .npy header ({} bytes declared, {} present)", path, header_len,
                              file_size - std::min(file_size, prefix_len)));
  std::string header(header_len, '\0');
  in.seekg(static_cast<std::streamoff>(prefix_len));
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  const NpyHeader h = parse_header(header, prefix_len + header_len, path);
  check_data_size(h, file_size - h.data_offset, path);

  Tensor t = Tensor::empty(h.dtype, h.shape);
  in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(h.data_bytes));
  if (static_cast<size_t>(in.gcount()) != h.data_bytes)
    throw IOError(fmt::format("{}: read failed after {} of {} data bytes", path, in.gcount(), h.data_bytes));
  normalise_bools(t);
  return t;
}

std::string serialize_npy(const Tensor& tensor) {
  if (!tensor.defined()) throw InvalidArgument("serialize_npy: the tensor is undefined");
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", npy_descr(tensor.dtype()),
                                 shape_literal(tensor.shape()));
  // Pad with spaces and a final '\n' so the data starts 64-byte aligned, as NumPy does.
  const bool v2 = kMagicLen + 4 + dict.size() + 1 > 0xffff;
  const size_t prefix_len = v2 ? 12 : 10;
  const size_t total = (prefix_len + dict.size() + 1 + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign;
  dict.append(total - prefix_len - dict.size() - 1, ' ');
  dict.push_back('\n');

  std::string out(kMagic, kMagicLen);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back('\0');
  const size_t n = dict.size();
  out.push_back(static_cast<char>(n & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  if (v2) {
    out.push_back(static_cast<char>((n >> 16) & 0xff));
    out.push_back(static_cast<char>((n >> 24) & 0xff));
  }
  out += dict;
  const Tensor packed = tensor.contiguous();
  out.append(static_cast<const char*>(packed.raw_data()), packed.nbytes());
  return out;
}

void save_npy(const Tensor& tensor, const std::string& path) {
  // Atomic replace (temp file, fsync, rename, folder fsync): a crash never leaves a torn array.
  write_file_atomically(path, serialize_npy(tensor));
}

}  // namespace kiln
