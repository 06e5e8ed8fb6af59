#include "trainer/loop/output_dir_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "kiln/error.h"

namespace kiln::trainer {

namespace fs = std::filesystem;

namespace {

std::string read_owner(int fd) {
  char buffer[512];
  const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
  if (n <= 0) return "";
  std::string text(buffer, static_cast<size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string this_owner() {
  char host[256] = "unknown";
  ::gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  const std::time_t now = std::time(nullptr);
  char when[32] = "";
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return fmt::format("pid {} on host {}, since {}", ::getpid(), host, when);
}

}  // namespace

OutputDirLock::OutputDirLock(const std::string& output_dir) : path_((fs::path(output_dir) / kLockFile).string()) {
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) throw IOError(fmt::format("cannot create output_dir '{}': {}", output_dir, ec.message()));
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IOError(fmt::format("cannot create the lock file '{}': {}", path_, std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string owner = read_owner(fd_);
    ::close(fd_);
    if (err == EWOULDBLOCK)
      throw InvalidArgument(
          fmt::format("output_dir '{}' is in use by another training run ({}); wait for it to "
                      "finish or choose another output_dir",
                      output_dir, owner.empty() ? "owner unknown" : owner));
    throw IOError(fmt::format("cannot lock '{}': {}", path_, std::strerror(err)));
  }
  const std::string stale = read_owner(fd_);
  if (!stale.empty())
    std::fprintf(stderr, "kiln: warning: output_dir '%s' was locked by a run that is gone (%s); taking it over\n",
                 output_dir.c_str(), stale.c_str());
  const std::string owner = this_owner() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, owner.data(), owner.size(), 0) != static_cast<ssize_t>(owner.size())) {
    const int err = errno;
    ::close(fd_);
    throw IOError(fmt::format("cannot write the lock file '{}': {}", path_, std::strerror(err)));
  }
  ::fsync(fd_);
}

OutputDirLock::~OutputDirLock() {
  if (fd_ < 0) return;
  if (::ftruncate(fd_, 0) == 0) ::fsync(fd_);
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace kiln::trainer
