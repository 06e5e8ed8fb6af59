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
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | extra_flags);
  int err = fd_ < 0 ? errno : 0;
  if (err == 0 && ::fstat(fd_, &stat_) != 0) err = errno;
  if (err == 0 && S_ISDIR(stat_.st_mode)) err = EISDIR;
  if (err == 0 && !S_ISREG(stat_.st_mode)) {
    ::close(fd_);
    const char* kind = S_ISFIFO(stat_.st_mode)   ? "a FIFO"
                       : S_ISCHR(stat_.st_mode)  ? "a character device"
                       : S_ISBLK(stat_.st_mode)  ? "a block device"
                       : S_ISSOCK(stat_.st_mode) ? "a socket"
                                                 : "not a regular file";
    throw IOError(fmt::format("cannot read {} '{}': it is {}, not a regular file", what_, path_, kind));
  }
  if (err == 0 && ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK) != 0) err = errno;
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

std::string ReadOnlyFile::read_all(uint64_t max_bytes) const {
  if (size() > max_bytes)
    throw IOError(fmt::format("cannot read {} '{}': it is {} bytes, more than the limit of {} bytes", what_, path_,
                              size(), max_bytes));
  std::string bytes(static_cast<size_t>(size()), '\0');
  read_at(bytes.data(), bytes.size(), 0);  // a file that shrank since open is an error, not a short read
  return bytes;
}

std::string read_file_bytes(const std::string& path, const std::string& what, uint64_t max_bytes) {
  return ReadOnlyFile(path, what).read_all(max_bytes);
}

}  // namespace kiln
