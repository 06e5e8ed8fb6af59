#include "trainer/loop/checkpoint_folder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
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
  // A step beyond int64 cannot be one Kiln wrote: not a checkpoint (and not an internal error).
  int64_t step = 0;
  const std::string digits = m[1].str();
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
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
  std::string templ = (fs::path(output_dir) / fmt::format(".{}{}{}XXXXXX", kCheckpointPrefix, step, kTmpMark)).string();
  if (::mkdtemp(templ.data()) == nullptr)
    throw IOError(
        fmt::format("cannot create a temporary checkpoint folder in '{}': {}", output_dir, std::strerror(errno)));
  const fs::path tmp(templ);
  try {
    write(tmp.string());
    fsync_path(tmp);
    if (fs::exists(target)) {
      // Replace: the old folder is moved aside first (rename needs an empty target). A kill between
      // the two renames leaves it as <tmp>.old beside the complete new one in <tmp>: the next start
      // (recover_checkpoint_folders) puts the new one in place, or the old one back.
      const fs::path old = fs::path(templ + kOldMark);
      fs::rename(target, old);
      fsync_path(output_dir);
      fs::rename(tmp, target);
      fsync_path(output_dir);
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

void recover_checkpoint_folders(const std::string& output_dir) {
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return;
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) entries.push_back(entry.path());
  std::sort(entries.begin(), entries.end());
  bool changed = false;
  for (const fs::path& p : entries) {
    const std::string name = p.filename().string();
    const std::string hidden = "." + kCheckpointPrefix;
    if (name.rfind(hidden, 0) != 0) continue;
    const size_t mark = name.find(kTmpMark);
    const size_t doomed = name.find(kDeletingMark);
    if (doomed != std::string::npos) {  // rotation was deleting it
      fs::remove_all(p, ec);
      changed = true;
      continue;
    }
    if (mark == std::string::npos) continue;
    const fs::path target = p.parent_path() / name.substr(1, mark - 1);
    const bool is_old =
        name.size() > kOldMark.size() && name.compare(name.size() - kOldMark.size(), kOldMark.size(), kOldMark) == 0;
    if (is_old) {
      // The replaced folder of an interrupted replace: the new one is complete in its temporary
      // folder when that still exists (it was fsynced before the old one moved), else in place.
      const fs::path fresh = p.parent_path() / name.substr(0, name.size() - kOldMark.size());
      if (!fs::exists(target) && fs::exists(fresh / kTrainerStateFile)) fs::rename(fresh, target);
      if (fs::exists(target)) fs::remove_all(p, ec);
      else fs::rename(p, target);  // put the old one back
      changed = true;
    } else if (!fs::exists(fs::path(p.string() + kOldMark))) {
      fs::remove_all(p, ec);  // an unfinished write: never complete
      changed = true;
    }
  }
  if (changed) fsync_path(output_dir);
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
  paths.reserve(found.size());
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
  // Each doomed folder is first renamed out of sight, then deleted: a kill midway leaves a hidden
  // folder for the next start to remove, never a half-deleted checkpoint-N.
  for (int64_t i = 0; i < remove; ++i) {
    const fs::path doomed(sorted[static_cast<size_t>(i)]);
    const fs::path aside = doomed.parent_path() / ("." + doomed.filename().string() + kDeletingMark);
    fs::rename(doomed, aside);
    fsync_path(output_dir);
    fs::remove_all(aside);
  }
}

}  // namespace kiln::trainer
