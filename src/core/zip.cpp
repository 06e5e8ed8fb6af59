// Zip reading (PKWARE APPNOTE 6.3): find the end-of-central-directory record at the end of the
// file (and the zip64 one it may point to), walk the central directory, then for a member read its
// local header to find the data. Sizes come from the central directory, which is authoritative
// even when a member was written with a data descriptor.
#include "core/zip.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/compression.h"
#include "core/file_io.h"
#include "kiln/error.h"

namespace kiln {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kEndSize = 22;
constexpr size_t kCentralSize = 46;
constexpr size_t kLocalSize = 30;

// Little-endian fields at checked offsets.
class Reader {
 public:
  Reader(const std::string& bytes, const std::string& path) : bytes_(bytes), path_(path) {}
  bool has(uint64_t offset, uint64_t n) const { return offset <= bytes_.size() && n <= bytes_.size() - offset; }
  uint64_t le(uint64_t offset, int n, const char* what) const {
    if (!has(offset, static_cast<uint64_t>(n)))
      throw CorruptFile(fmt::format("'{}': bad zip file: {} at byte offset {} lies past the end of the file ({} bytes)",
                                    path_, what, offset, bytes_.size()));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(bytes_[offset + static_cast<uint64_t>(i)]);
    return v;
  }
  uint16_t u16(uint64_t offset, const char* what) const { return static_cast<uint16_t>(le(offset, 2, what)); }
  uint32_t u32(uint64_t offset, const char* what) const { return static_cast<uint32_t>(le(offset, 4, what)); }
  uint64_t u64(uint64_t offset, const char* what) const { return le(offset, 8, what); }

 private:
  const std::string& bytes_;
  const std::string& path_;
};

}  // namespace

ZipArchive::ZipArchive(std::string path) : path_(std::move(path)), bytes_(read_file_bytes(path_, "zip file")) {
  read_directory();
}

namespace {

struct Directory {
  uint64_t count = 0, size = 0, offset = 0;
};

// The end-of-central-directory record (zip64's when the classic fields are saturated): where the
// central directory is and how many entries it has.
Directory find_directory(const Reader& r, uint64_t file_size, const std::string& path) {
  // The end record is the last 22 bytes plus a comment of up to 65535 bytes.
  if (file_size < kEndSize)
    throw CorruptFile(
        fmt::format("'{}' is not a zip file: {} bytes is too short for an end-of-central-directory "
                    "record",
                    path, file_size));
  uint64_t end = file_size - kEndSize;
  const uint64_t lowest = file_size > kEndSize + 65535 ? file_size - kEndSize - 65535 : 0;
  while (r.u32(end, "end record") != kEndSig || end + kEndSize + r.u16(end + 20, "comment length") != file_size) {
    if (end == lowest)
      throw CorruptFile(
          fmt::format("'{}' is not a zip file or is truncated: no end-of-central-directory record in its "
                      "last {} bytes (searched from byte offset {})",
                      path, file_size - lowest, lowest));
    --end;
  }
  if (r.u16(end + 4, "disk number") != 0 || r.u16(end + 6, "directory disk") != 0)
    throw Unsupported(fmt::format("'{}': multi-disk zip archives are not supported", path));
  Directory d{r.u16(end + 10, "entry count"), r.u32(end + 12, "directory size"), r.u32(end + 16, "directory offset")};
  uint64_t limit = end;
  if (d.count == 0xffff || d.size == 0xffffffff || d.offset == 0xffffffff) {
    // Zip64: a locator just before the end record points to the zip64 end record.
    if (end < 20 || r.u32(end - 20, "zip64 locator") != kZip64LocatorSig)
      throw CorruptFile(
          fmt::format("'{}': bad zip file: the end record at byte offset {} needs zip64 fields but no "
                      "zip64 locator precedes it",
                      path, end));
    const uint64_t z = r.u64(end - 20 + 8, "zip64 end record offset");
    if (r.u32(z, "zip64 end record") != kZip64EndSig)
      throw CorruptFile(fmt::format("'{}': bad zip file: no zip64 end record at byte offset {}", path, z));
    d = {r.u64(z + 32, "zip64 entry count"), r.u64(z + 40, "zip64 directory size"),
         r.u64(z + 48, "zip64 directory offset")};
    limit = z;
  }
  if (d.offset > limit || d.size > limit - d.offset)
    throw CorruptFile(
        fmt::format("'{}': bad zip central directory: {} bytes at byte offset {} overlap the end record "
                    "at byte offset {} (truncated or corrupt file)",
                    path, d.size, d.offset, limit));
  return d;
}

// The zip64 extra field (id 1) among an entry's extra fields [x, x_end): the 64-bit values of the
// fields saturated at 0xffffffff, in order.
void read_zip64_extra(const Reader& r, uint64_t x, uint64_t x_end, ZipMember& m, const std::string& path) {
  while (x + 4 <= x_end) {
    const uint16_t id = r.u16(x, "extra id");
    const uint16_t len = r.u16(x + 2, "extra length");
    if (x + 4 + len > x_end)
      throw CorruptFile(
          fmt::format("'{}': bad zip central directory: extra field at byte offset {} of '{}' runs past "
                      "its entry",
                      path, x, m.name));
    if (id == 1) {
      uint64_t f = x + 4;
      const auto take = [&](uint64_t& field) {
        if (field != 0xffffffff) return;
        if (f + 8 > x + 4 + len)
          throw CorruptFile(fmt::format("'{}': bad zip central directory: short zip64 field at byte offset {} of '{}'",
                                        path, f, m.name));
        field = r.u64(f, "zip64 field");
        f += 8;
      };
      take(m.size);
      take(m.compressed_size);
      take(m.local_header_offset);
    }
    x += 4 + len;
  }
}

}  // namespace

void ZipArchive::read_directory() {
  const Reader r(bytes_, path_);
  const Directory dir = find_directory(r, bytes_.size(), path_);
  const uint64_t dir_end = dir.offset + dir.size;
  uint64_t pos = dir.offset;
  std::set<std::string> names;
  for (uint64_t i = 0; i < dir.count; ++i) {
    if (pos + kCentralSize > dir_end || r.u32(pos, "directory entry") != kCentralSig)
      throw CorruptFile(
          fmt::format("'{}': bad zip central directory: entry {} of {} at byte offset {} has no "
                      "directory signature",
                      path_, i, dir.count, pos));
    ZipMember m;
    m.directory_offset = pos;
    m.flags = r.u16(pos + 8, "flags");
    m.method = r.u16(pos + 10, "method");
    m.crc32 = r.u32(pos + 16, "crc-32");
    m.compressed_size = r.u32(pos + 20, "compressed size");
    m.size = r.u32(pos + 24, "size");
    const uint16_t name_len = r.u16(pos + 28, "name length");
    const uint16_t extra_len = r.u16(pos + 30, "extra length");
    const uint16_t comment_len = r.u16(pos + 32, "comment length");
    if (r.u16(pos + 34, "disk") != 0 && r.u16(pos + 34, "disk") != 0xffff)
      throw Unsupported(fmt::format("'{}': multi-disk zip archives are not supported", path_));
    m.local_header_offset = r.u32(pos + 42, "local header offset");
    const uint64_t entry_end = pos + kCentralSize + name_len + extra_len + comment_len;
    if (entry_end > dir_end)
      throw CorruptFile(
          fmt::format("'{}': bad zip central directory: entry {} at byte offset {} runs past the "
                      "directory's end at byte offset {}",
                      path_, i, pos, dir_end));
    m.name = bytes_.substr(pos + kCentralSize, name_len);
    const uint64_t extra = pos + kCentralSize + name_len;
    read_zip64_extra(r, extra, extra + extra_len, m, path_);
    if (!names.insert(m.name).second)  // which one a reader takes differs between tools: refuse it
      throw CorruptFile(fmt::format("'{}': the zip archive has two members named '{}'", path_, m.name));
    members_.push_back(std::move(m));
    pos = entry_end;
  }
}

uint64_t ZipArchive::data_offset(const ZipMember& m) const {
  const Reader r(bytes_, path_);
  const uint64_t h = m.local_header_offset;
  if (!r.has(h, kLocalSize) || r.u32(h, "local header") != kLocalSig)
    throw CorruptFile(
        fmt::format("'{}': bad zip file: member '{}' has no local header at byte offset {} (its directory "
                    "entry is at byte offset {})",
                    path_, m.name, h, m.directory_offset));
  return h + kLocalSize + r.u16(h + 26, "name length") + r.u16(h + 28, "extra length");
}

std::string ZipArchive::read(const ZipMember& m) const {
  if (m.flags & 1)
    throw Unsupported(fmt::format("'{}': member '{}' is encrypted; Kiln reads plain zip archives", path_, m.name));
  const uint64_t offset = data_offset(m);
  const Reader r(bytes_, path_);
  if (!r.has(offset, m.compressed_size))
    throw CorruptFile(
        fmt::format("'{}' is truncated: member '{}' needs {} bytes from byte offset {}, the file ends at "
                    "byte offset {}",
                    path_, m.name, m.compressed_size, offset, bytes_.size()));
  const std::string label = fmt::format("'{}' member '{}'", path_, m.name);
  std::string out;
  if (m.method == 0) {
    if (m.compressed_size != m.size)
      throw CorruptFile(fmt::format("{}: stored member at byte offset {} has compressed size {} but size {}", label,
                                    offset, m.compressed_size, m.size));
    out = bytes_.substr(offset, m.size);
  } else if (m.method == 8) {
    out = inflate_raw(bytes_.data() + offset, m.compressed_size, m.size, label, offset);
  } else {
    throw Unsupported(
        fmt::format("{}: zip compression method {} is not supported (stored and deflate are)", label, m.method));
  }
  const uint32_t crc = crc32_of(out);
  if (crc != m.crc32)
    throw CorruptFile(
        fmt::format("{}: the data at byte offset {} fails its CRC-32 check (stored {:08x}, computed {:08x})", label,
                    offset, m.crc32, crc));
  return out;
}

}  // namespace kiln
