// Reading files with errors that name what the file is for and where the data went wrong. Every
// reader in Kiln (ONNX models and tensors, external data, safetensors, IDX, CSV, npy/npz) opens
// files through here.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

// A file open for reading, closed on destruction. `what` names the file's role in errors
// ("model", "IDX file"): IOError "cannot open model 'x.onnx': No such file or directory".
class ReadOnlyFile {
 public:
  // Only regular files are read: directories are refused with EISDIR's message, and FIFOs,
  // devices and sockets (which can block open() or never end: /dev/zero) with IOError saying
  // what they are. `extra_flags` are added to O_RDONLY | O_CLOEXEC (O_NOFOLLOW, say).
  ReadOnlyFile(std::string path, std::string what, int extra_flags = 0);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  const std::string& path() const { return path_; }
  // Size at open time.
  uint64_t size() const { return static_cast<uint64_t>(stat_.st_size); }
  // Reads exactly `n` bytes at `offset`; IOError naming the file and offset on errors and on an end
  // of file before `n` bytes (a file that shrank, or a range past its end).
  void read_at(void* dst, size_t n, uint64_t offset) const;
  // The whole file; IOError when it is larger than `max_bytes`, before anything is read.
  std::string read_all(uint64_t max_bytes) const;

 private:
  std::string path_;
  std::string what_;
  int fd_ = -1;
  struct stat stat_ {};
};

// Files Kiln reads whole are capped by default below what protobuf and the readers can address.
inline constexpr uint64_t kMaxWholeFileBytes = uint64_t{1} << 31;  // 2 GiB

// The bytes of a whole regular file of at most `max_bytes`.
std::string read_file_bytes(const std::string& path, const std::string& what, uint64_t max_bytes = kMaxWholeFileBytes);

}  // namespace kiln
