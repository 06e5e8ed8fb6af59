// Crash-safe file replacement: bytes go to a temporary file beside the target, which is flushed to
// disk and renamed over the target, and then the folder is flushed too. A crash at any point leaves
// either the old file or the complete new one, never a torn mix (what a checkpoint or a model file
// written during training must guarantee).
//
//   kiln::write_file_atomically("model.onnx", bytes);        // one call for data already in memory
//
//   kiln::AtomicFile f("weights.safetensors");               // streaming form for large data
//   f.write(header.data(), header.size());
//   f.write(tensor.raw_data(), tensor.nbytes());
//   f.commit();                                              // nothing is visible before this
//
// Every failure is an IOError naming the target path and the reason; the temporary file is removed
// whenever the write does not complete (an exception, or an AtomicFile destroyed without commit()).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln {

class AtomicFile {
 public:
  // Creates "<path>.tmp-XXXXXX" in the target's folder (the same file system, so rename is atomic).
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary file unless commit() succeeded
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // fsync, rename over the target, fsync the folder. After this the AtomicFile is spent.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  void discard() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

void write_file_atomically(const std::string& path, std::string_view bytes);

// Removes the temporary files ("<name>.tmp-XXXXXX") that writes killed before commit() left in
// `dir` (not in its subfolders); returns how many. Only for a folder no other process writes to
// (the Trainer calls it for output_dir and its artifacts while holding output_dir's lock).
size_t remove_stale_temporaries(const std::string& dir);

}  // namespace kiln
