// The lock a training run holds on its output_dir, so that two runs never write the same
// checkpoints: an advisory lock (flock) on output_dir/.kiln-train.lock, whose text names the
// owner (pid, host, start time). The kernel drops the lock when its process dies, so a lock left
// by a killed run is taken over, with a warning naming it; a live one is an error naming it.
#pragma once

#include <string>

namespace kiln::trainer {

inline const std::string kLockFile = ".kiln-train.lock";

class OutputDirLock {
 public:
  // Creates output_dir if needed. Throws InvalidArgument naming the other run's pid and host when
  // it holds the lock, IOError when the lock file cannot be created.
  explicit OutputDirLock(const std::string& output_dir);
  ~OutputDirLock();  // empties the file (a clean exit leaves no owner) and releases the lock
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace kiln::trainer
