#include "trainer/loop/checkpoint_folder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>

#include "kiln/error.h"

namespace kiln::trainer {

namespace fs = std::filesystem;

namespace {

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) throw IOError(fmt::format("cannot open '{}' to flush it: {}", p.string(), std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw IOError(fmt::format("cannot flush '{}': {}", p.string(), std::strerror(err)));
}

std::optional<int64_t> step_of(const fs::path& p) {
  static const std::regex re("^checkpoint-([0-9]+)$");
  std::smatch m;
  const std::string name = p.filename().string();
  if (!std::regex_match(name, m, re)) return std::nullopt;
  return std::stoll(m[1].str());
}

bool same_folder(const std::string& a, const std::string& b) {
  return fs::path(a).lexically_normal().filename() == fs::path(b).lexically_normal().filename();
}

}  // namespace

std::string write_checkpoint_folder(const std::string& output_dir, int64_t step,
                                    const std::function<void(const std::string& folder)>& write) {
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) throw IOError(fmt::format("cannot create output_dir '{}': {}", output_dir, ec.message()));
  const fs::path target = fs::path(output_dir) / fmt::format("{}{}", kCheckpointPrefix, step);
  std::string templ = (fs::path(output_dir) / fmt::format(".{}{}.tmp-XXXXXX", kCheckpointPrefix, step)).string();
  if (::mkdtemp(templ.data()) == nullptr)
    throw IOError(
        fmt::format("cannot create a temporary checkpoint folder in '{}': {}", output_dir, std::strerror(errno)));
  const fs::path tmp(templ);
  try {
    write(tmp.string());
    fsync_path(tmp);
    if (fs::exists(target)) {  // replace: move the old one aside first (rename needs an empty target)
      const fs::path old = fs::path(templ + ".old");
      fs::rename(target, old);
      fs::rename(tmp, target);
      fs::remove_all(old);
    } else {
      fs::rename(tmp, target);
    }
    fsync_path(output_dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return target.string();
}

std::vector<std::string> sorted_checkpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    if (!entry.is_directory()) continue;
    const auto step = step_of(entry.path());
    if (step && fs::exists(entry.path() / kTrainerStateFile)) found.emplace_back(*step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [s, p] : found) paths.push_back(std::move(p));
  return paths;
}

std::optional<std::string> last_checkpoint(const std::string& output_dir) {
  auto all = sorted_checkpoints(output_dir);
  if (all.empty()) return std::nullopt;
  return all.back();
}

void rotate_checkpoints(const std::string& output_dir, int64_t limit, const std::optional<std::string>& best) {
  if (limit <= 0) return;
  std::vector<std::string> sorted = sorted_checkpoints(output_dir);
  if (static_cast<int64_t>(sorted.size()) <= limit) return;
  // The best checkpoint moves to the second-to-last place, out of deletion's reach (HF).
  if (best) {
    auto it = std::find_if(sorted.begin(), sorted.end(), [&](const std::string& p) { return same_folder(p, *best); });
    if (it != sorted.end()) {
      std::string b = *it;
      sorted.erase(it);
      sorted.insert(sorted.end() - (sorted.empty() ? 0 : 1), b);
    }
    if (limit == 1 && !same_folder(sorted.back(), *best)) limit = 2;
  }
  const int64_t remove = static_cast<int64_t>(sorted.size()) - limit;
  for (int64_t i = 0; i < remove; ++i) fs::remove_all(sorted[static_cast<size_t>(i)]);
}

}  // namespace kiln::trainer
