// A small reader of zip archives (what np.savez and np.savez_compressed write): the central
// directory (zip64 too), stored and deflated members, CRC-32 checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct ZipMember {
  std::string name;
  uint16_t flags = 0;
  uint16_t method = 0;  // 0 stored, 8 deflated
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t local_header_offset = 0;
  uint64_t directory_offset = 0;  // of its central directory entry, for errors
};

class ZipArchive {
 public:
  // Reads the file and its central directory: IOError if it cannot be read, CorruptFile naming the
  // file and byte offset for a missing or inconsistent directory, Unsupported for multi-disk archives.
  explicit ZipArchive(std::string path);
  const std::string& path() const { return path_; }
  const std::vector<ZipMember>& members() const { return members_; }
  // The member's bytes, decompressed and CRC-checked; Unsupported for encryption or methods other
  // than stored and deflate, CorruptFile for bad local headers, data or CRCs.
  std::string read(const ZipMember& member) const;
  // Where the member's data starts in the file (after its local header).
  uint64_t data_offset(const ZipMember& member) const;

 private:
  void read_directory();
  std::string path_;
  std::string bytes_;
  std::vector<ZipMember> members_;
};

}  // namespace kiln
