#include "core/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln/error.h"

namespace kiln {

namespace {

std::string parent_folder(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// The permissions a plain open(O_CREAT, 0666) would give: mkstemp makes 0600 files, which would
// silently hide saved models from other users. umask() itself cannot be read without changing it
// (racy with other threads), so read it from /proc; fall back to the usual 022.
mode_t default_file_mode() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0) {
      try {
        return static_cast<mode_t>(0666 & ~std::stoul(line.substr(6), nullptr, 8));
      } catch (const std::exception&) {
        break;
      }
    }
  }
  return 0644;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw IOError("cannot write a file with an empty path");
  std::string pattern = path_ + ".tmp-XXXXXX";
  fd_ = ::mkostemp(pattern.data(), O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    throw IOError(fmt::format("cannot write '{}': cannot create a temporary file in '{}': {}", path_,
                              parent_folder(path_), std::strerror(err)));
  }
  temp_path_ = pattern;
  struct stat existing {};
  const mode_t mode = ::stat(path_.c_str(), &existing) == 0 ? (existing.st_mode & 07777) : default_file_mode();
  if (::fchmod(fd_, mode) != 0) fail("cannot set the permissions of the temporary file", errno);
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

void AtomicFile::fail(const std::string& what, int err) {
  const std::string temp = temp_path_;
  discard();
  throw IOError(fmt::format("cannot write '{}': {} ('{}'): {}", path_, what, temp, std::strerror(err)));
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw IOError(fmt::format("cannot write '{}': the file was already committed or discarded", path_));
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed", errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw IOError(fmt::format("cannot write '{}': the file was already committed or discarded", path_));
  if (::fsync(fd_) != 0) fail("fsync failed", errno);
  // close() can report a deferred write error (NFS, quota), so it is checked like a write.
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close failed", errno);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) fail("rename over the target failed", errno);
  temp_path_.clear();
  committed_ = true;
  // The rename is durable only once the folder's entry is on disk.
  const std::string dir = parent_folder(path_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    const int err = errno;
    throw IOError(
        fmt::format("wrote '{}' but cannot open its folder '{}' to flush it: {}", path_, dir, std::strerror(err)));
  }
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  // Some file systems cannot fsync folders (EINVAL); the data itself is already safe there.
  if (rc != 0 && err != EINVAL)
    throw IOError(fmt::format("wrote '{}' but flushing its folder '{}' failed: {}", path_, dir, std::strerror(err)));
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFile file(path);
  file.write(bytes);
  file.commit();
}

size_t remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  size_t removed = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t mark = name.rfind(".tmp-");
    const bool temporary = mark != std::string::npos && mark > 0 && name.size() == mark + 11 &&
                           std::all_of(name.begin() + static_cast<std::ptrdiff_t>(mark) + 5, name.end(),
                                       [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
    std::error_code type_ec;
    if (temporary && entry.is_regular_file(type_ec) && fs::remove(entry.path(), type_ec)) ++removed;
  }
  return removed;
}

}  // namespace kiln
