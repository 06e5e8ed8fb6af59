// kiln-conformance NODE_DIR [--list FILE] [--strict] [--filter SUBSTR] [--timeout S] [--in-process]
//                  [--known-bad FILE]
//
// Runs ONNX's backend node cases (from scripts/gen-onnx-node-tests) through kiln::Session. Each case
// runs in a forked child by default, so a crash or a hang in one kernel is reported as that case's
// failure instead of ending the run. The cases the known-bad list (tools/conformance/known_bad.txt,
// shared with the Python backend test) marks [skip] are not run and count as skipped, with its reason.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "case_runner.h"

namespace fs = std::filesystem;
using kiln::conformance::CaseResult;
using kiln::conformance::KnownBad;
using kiln::conformance::Status;

namespace {

struct Options {
  std::string node_dir;
  std::string list_file;
  std::string filter;
  std::string known_bad = KILN_CONFORMANCE_KNOWN_BAD;
  bool strict = false;
  bool in_process = false;
  int timeout_s = 120;
};

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

// Case folders (those holding model.onnx) in name order.
std::vector<fs::path> find_cases(const Options& o) {
  if (!fs::is_directory(o.node_dir)) throw std::runtime_error(fmt::format("'{}' is not a folder", o.node_dir));
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(o.node_dir)) {
    if (!fs::exists(entry.path() / "model.onnx")) continue;
    if (!o.filter.empty() && entry.path().filename().string().find(o.filter) == std::string::npos) continue;
    cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0 && errno != EINTR) return;
    if (n > 0) done += static_cast<size_t>(n);
  }
}

// Runs the case in a child process: its status byte and reason come back through a pipe; a
// signal (crash, or SIGALRM after the timeout) becomes a failure naming the signal.
CaseResult run_isolated(const fs::path& dir, int timeout_s) {
  int fds[2];
  if (::pipe(fds) != 0) return {Status::Failed, fmt::format("pipe failed: {}", std::strerror(errno))};
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return {Status::Failed, fmt::format("fork failed: {}", std::strerror(errno))};
  }
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(static_cast<unsigned>(timeout_s));
    const CaseResult r = kiln::conformance::run_case(dir.string());
    write_all(fds[1], std::string(1, static_cast<char>('0' + static_cast<int>(r.status))) + r.reason);
    ::close(fds[1]);
    ::_exit(0);  // skip static destructors and atexit handlers inherited from the parent
  }
  ::close(fds[1]);
  std::string message;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) message.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR) break;
  }
  ::close(fds[0]);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    if (sig == SIGALRM) return {Status::Failed, fmt::format("timed out after {} s", timeout_s)};
    return {Status::Failed, fmt::format("crashed: signal {} ({})", sig, strsignal(sig))};
  }
  if (message.empty() || message[0] < '0' || message[0] > '2')
    return {Status::Failed, fmt::format("the case process exited with status {} and no result",
                                        WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1)};
  return {static_cast<Status>(message[0] - '0'), message.substr(1)};
}

// A [skip] case of the known-bad list is not run; any other runs in this process or a child.
CaseResult run_one(const Options& o, const fs::path& dir, const std::map<std::string, KnownBad>& known_bad) {
  const auto bad = known_bad.find(dir.filename().string());
  if (bad != known_bad.end() && bad->second.skip) return {Status::Skipped, bad->second.reason};
  return o.in_process ? kiln::conformance::run_case(dir.string()) : run_isolated(dir, o.timeout_s);
}

int run(const Options& o) {
  const std::vector<fs::path> cases = find_cases(o);
  std::ofstream list;
  if (!o.list_file.empty()) {
    list.open(o.list_file, std::ios::trunc);
    if (!list) throw std::runtime_error(fmt::format("cannot write the list file '{}'", o.list_file));
  }
  const auto known_bad = kiln::conformance::load_known_bad(o.known_bad);
  int counts[3] = {0, 0, 0};
  for (const fs::path& dir : cases) {
    const CaseResult r = run_one(o, dir, known_bad);
    ++counts[static_cast<int>(r.status)];
    std::string line = fmt::format("{} {}", status_name(r.status), dir.filename().string());
    if (!r.reason.empty()) line += "  " + one_line(r.reason);
    if (list.is_open()) list << line << "\n";
    if (r.status == Status::Failed) std::cout << line << std::endl;
  }
  if (list.is_open()) {
    list.close();
    if (!list) throw std::runtime_error(fmt::format("writing the list file '{}' failed", o.list_file));
  }
  std::cout << fmt::format("{} passed, {} failed, {} skipped", counts[0], counts[1], counts[2]) << std::endl;
  return o.strict && counts[1] > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs ONNX backend node conformance cases through Kiln.", "kiln-conformance"};
  Options o;
  app.add_option("node_dir", o.node_dir, "Folder of case folders (model.onnx + test_data_set_*)")->required();
  app.add_option("--list", o.list_file, "Write 'status name  reason' for every case to FILE");
  app.add_flag("--strict", o.strict, "Exit 1 if any case failed");
  app.add_option("--filter", o.filter, "Run only cases whose name contains SUBSTR");
  app.add_option("--timeout", o.timeout_s, "Seconds a case may take before it counts as failed")
      ->check(CLI::PositiveNumber);
  app.add_option("--known-bad", o.known_bad, "The known-bad list (default: the source tree's known_bad.txt)");
  app.add_flag("--in-process", o.in_process, "Run cases in this process (for debuggers); a crash ends the run");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "kiln-conformance: error: " << one_line(e.what()) << std::endl;
    return 1;
  }
}
