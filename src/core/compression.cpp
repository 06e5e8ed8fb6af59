#include "core/compression.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "kiln/error.h"

namespace kiln {

uint32_t crc32_of(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < bytes.size();) {
    const size_t n = std::min<size_t>(bytes.size() - done, size_t{1} << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}
namespace {

// The largest ratio of deflate output to input (zlib's technical details: 1032:1).
constexpr size_t kMaxDeflateRatio = 1032;

// zlib counts input in uInt; larger inputs go in slices.
constexpr size_t kSlice = size_t{1} << 30;

// Owns a z_stream so that every exit path frees it.
class Inflater {
 public:
  explicit Inflater(int window_bits) {
    if (inflateInit2(&z_, window_bits) != Z_OK) throw Error("zlib: inflateInit2 failed (out of memory?)");
  }
  ~Inflater() { inflateEnd(&z_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  z_stream* operator->() { return &z_; }
  z_stream* get() { return &z_; }

 private:
  z_stream z_{};
};

}  // namespace

bool is_gzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

std::string gunzip(const std::string& bytes, const std::string& path) {
  Inflater z(15 + 16);  // 15-bit window, gzip wrapper
  std::string out;
  // The trailer's ISIZE (size mod 2^32) is a good first guess for a single-member file.
  if (bytes.size() >= 18) {
    const auto* t = reinterpret_cast<const unsigned char*>(bytes.data() + bytes.size() - 4);
    // One spare byte lets the last inflate call see the end marker without growing the buffer.
    out.resize(std::min<size_t>(uint32_t(t[0]) | uint32_t(t[1]) << 8 | uint32_t(t[2]) << 16 | uint32_t(t[3]) << 24,
                                bytes.size() * 1032) +
               1);  // deflate's best ratio is about 1032:1
  }
  size_t in_pos = 0;
  size_t produced = 0;
  for (;;) {
    if (z->avail_in == 0 && in_pos < bytes.size()) {
      const size_t n = std::min(kSlice, bytes.size() - in_pos);
      z->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + in_pos));
      z->avail_in = static_cast<uInt>(n);
      in_pos += n;
    }
    if (produced == out.size()) out.resize(std::max<size_t>(out.size() * 2, 65536));
    const size_t room = std::min(kSlice, out.size() - produced);
    z->next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    z->avail_out = static_cast<uInt>(room);
    const size_t consumed = in_pos - z->avail_in;
    const int rc = inflate(z.get(), Z_NO_FLUSH);
    produced += room - z->avail_out;
    const size_t offset = in_pos - z->avail_in;  // compressed bytes consumed so far
    if (rc == Z_STREAM_END) {
      if (offset == bytes.size()) break;
      // Another member follows (as `cat a.gz b.gz` makes); anything else is trailing garbage.
      if (!is_gzip(bytes.substr(offset, 2)))
        throw CorruptFile(
            fmt::format("'{}' is corrupt: {} bytes of trailing garbage after the gzip data at byte offset {}", path,
                        bytes.size() - offset, offset));
      inflateReset(z.get());
      continue;
    }
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR)
      throw CorruptFile(fmt::format("'{}' is corrupt: bad gzip data at byte offset {}: {}", path, offset,
                                    z->msg ? z->msg : "invalid deflate stream"));
    if (rc == Z_MEM_ERROR) throw Error(fmt::format("out of memory while decompressing '{}'", path));
    // Z_BUF_ERROR or Z_OK with nothing consumed or produced: the input ended inside the stream.
    if (in_pos == bytes.size() && z->avail_in == 0 && offset == consumed && z->avail_out != 0)
      throw CorruptFile(
          fmt::format("'{}' is truncated or corrupt: the gzip stream ends at byte offset {} before its end "
                      "marker ({} bytes decompressed)",
                      path, bytes.size(), produced));
  }
  out.resize(produced);
  return out;
}

std::string inflate_raw(const char* data, size_t size, size_t expected, const std::string& label, size_t base_offset) {
  if (size > std::numeric_limits<uInt>::max() || expected > std::numeric_limits<uInt>::max())
    throw Unsupported(fmt::format("{}: compressed members over 4 GiB are not supported", label));
  // Deflate expands at most 1032 to 1; a directory that claims more is corrupt, and is refused
  // before the output buffer is allocated (a 200-byte file once asked for 4 GiB here).
  if (expected > size * kMaxDeflateRatio + 1024)
    throw CorruptFile(
        fmt::format("{}: the zip directory says {} compressed bytes inflate to {}, more than deflate "
                    "can make of them",
                    label, size, expected));
  Inflater z(-15);  // raw deflate, as zip members are stored
  std::string out(expected, '\0');
  z->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  z->avail_in = static_cast<uInt>(size);
  // One spare byte of room reveals data that inflates to more than `expected`.
  char spare = 0;
  z->next_out = expected ? reinterpret_cast<Bytef*>(out.data()) : reinterpret_cast<Bytef*>(&spare);
  z->avail_out = static_cast<uInt>(expected ? expected : 1);
  int rc = inflate(z.get(), Z_FINISH);
  if (rc == Z_BUF_ERROR && z->avail_out == 0 && expected) {
    z->next_out = reinterpret_cast<Bytef*>(&spare);
    z->avail_out = 1;
    rc = inflate(z.get(), Z_FINISH);
  }
  const size_t offset = base_offset + (size - z->avail_in);
  if (rc == Z_STREAM_END) {
    if (z->total_out != expected)
      throw CorruptFile(
          fmt::format("{}: deflate data at byte offset {} inflates to {} bytes, the zip directory says {}", label,
                      base_offset, z->total_out, expected));
    return out;
  }
  if (rc == Z_DATA_ERROR)
    throw CorruptFile(
        fmt::format("{}: bad deflate data at byte offset {}: {}", label, offset, z->msg ? z->msg : "invalid stream"));
  if (rc == Z_MEM_ERROR) throw Error(fmt::format("out of memory while inflating {}", label));
  if (z->total_out > expected)
    throw CorruptFile(
        fmt::format("{}: deflate data at byte offset {} inflates to more than the {} bytes the zip "
                    "directory says",
                    label, base_offset, expected));
  throw CorruptFile(fmt::format("{}: deflate data is truncated: it ends at byte offset {} after {} of {} bytes", label,
                                offset, z->total_out, expected));
}

}  // namespace kiln
