#include "core/file_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiln/error.h"

namespace kiln {

ReadOnlyFile::ReadOnlyFile(std::string path, std::string what, int extra_flags)
    : path_(std::move(path)), what_(std::move(what)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | extra_flags);
  int err = fd_ < 0 ? errno : 0;
  if (err == 0 && ::fstat(fd_, &stat_) != 0) err = errno;
  if (err == 0 && S_ISDIR(stat_.st_mode)) err = EISDIR;
  if (err != 0) {
    if (fd_ >= 0) ::close(fd_);
    throw IOError(fmt::format("cannot open {} '{}': {}", what_, path_, std::strerror(err)));
  }
}

ReadOnlyFile::~ReadOnlyFile() { ::close(fd_); }

void ReadOnlyFile::read_at(void* dst, size_t n, uint64_t offset) const {
  char* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const std::string why = got < 0 ? std::strerror(errno) : "unexpected end of file";
      throw IOError(
          fmt::format("cannot read {} '{}': {} after {} of {} bytes at offset {}", what_, path_, why, done, n, offset));
    }
    done += static_cast<size_t>(got);
  }
}

std::string ReadOnlyFile::read_to_end() const {
  std::string bytes;
  if (is_regular()) bytes.reserve(static_cast<size_t>(size()));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw IOError(fmt::format("cannot read {} '{}': {}", what_, path_, std::strerror(errno)));
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  return bytes;
}

std::string read_file_bytes(const std::string& path, const std::string& what) {
  return ReadOnlyFile(path, what).read_to_end();
}

}  // namespace kiln
