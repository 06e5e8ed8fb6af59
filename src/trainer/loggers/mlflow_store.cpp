// MLflow's local file store, written the way mlflow/store/tracking/file_store.py writes it.
#include "trainer/loggers/mlflow_store.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "core/atomic_file.h"
#include "kiln/error.h"

namespace kiln::trainer::mlflow {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxKeyLength = 250;        // MLflow's MAX_ENTITY_KEY_LENGTH
constexpr size_t kMaxTagValueLength = 5000;  // MAX_TAG_VAL_LENGTH (longer values are truncated)
constexpr int kSourceTypeLocal = 4;          // SourceType.LOCAL

// Code points of a UTF-8 string (Python's len()).
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The first `limit` code points of s.
std::string truncate_code_points(const std::string& s, size_t limit) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && n++ == limit) return s.substr(0, i);
  }
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(const std::string& s, const std::string& uri) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int hi = i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
    if (hi < 0 || lo < 0)
      throw InvalidArgument(fmt::format("MLFLOW_TRACKING_URI '{}': bad percent-escape at '{}'", uri, s.substr(i)));
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IOError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A param or tag file, written as MLflow's write_to writes it (no fsync: a run has a hundred of
// them, and a torn one is rewritten by the next setup).
void write_small_file(const fs::path& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw IOError(fmt::format("{}: cannot open for writing: {}", path.string(), std::strerror(errno)));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) throw IOError(fmt::format("{}: cannot write: {}", path.string(), std::strerror(err)));
}

void make_dirs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IOError(fmt::format("{}: cannot create the folder: {}", dir.string(), ec.message()));
}

int64_t int_field(const std::map<std::string, std::string>& meta, const std::string& key, const fs::path& path) {
  auto it = meta.find(key);
  if (it == meta.end()) throw CorruptFile(fmt::format("{}: no '{}' field", path.string(), key));
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw CorruptFile(fmt::format("{}: '{}' is '{}', not an integer", path.string(), key, it->second));
}

const std::string& str_field(const std::map<std::string, std::string>& meta, const std::string& key,
                             const fs::path& path) {
  auto it = meta.find(key);
  if (it == meta.end()) throw CorruptFile(fmt::format("{}: no '{}' field", path.string(), key));
  return it->second;
}

// The experiment folders of the store (MLflow's _get_active_experiments: every sub-folder but
// .trash and the model registry's "models").
std::vector<fs::path> experiment_dirs(const fs::path& root) {
  std::vector<fs::path> dirs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name != ".trash" && name != "models") dirs.push_back(entry.path());
  }
  if (ec) throw IOError(fmt::format("{}: cannot list the MLflow store: {}", root.string(), ec.message()));
  return dirs;
}

// The name in an experiment's meta.yaml, or nothing (with a warning, as MLflow warns about a
// malformed experiment and goes on) when it cannot be read.
std::optional<std::string> experiment_name(const fs::path& dir) {
  const fs::path meta = dir / "meta.yaml";
  if (!fs::exists(meta)) return std::nullopt;
  try {
    auto m = read_flat_yaml(meta);
    auto it = m.find("name");
    if (it != m.end()) return it->second;
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln: warning: skipping malformed MLflow experiment: %s\n", e.what());
  }
  return std::nullopt;
}

}  // namespace

fs::path tracking_root(const std::string& uri) {
  if (uri.empty()) return fs::absolute("mlruns");
  // A scheme is letters, digits, "+", "-", "." before the first ":" (RFC 3986).
  const auto colon = uri.find(':');
  bool has_scheme = colon != std::string::npos && colon > 0 && std::isalpha(static_cast<unsigned char>(uri[0]));
  for (size_t i = 0; has_scheme && i < colon; ++i) {
    const char c = uri[i];
    has_scheme = std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
  }
  if (!has_scheme) return fs::absolute(uri);
  std::string scheme = uri.substr(0, colon);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "file")
    throw Unsupported(
        fmt::format("MLFLOW_TRACKING_URI '{}': Kiln writes only local MLflow file stores (a folder or "
                    "a file: URI), not '{}:' tracking servers; log to a folder and serve it with "
                    "`mlflow ui --backend-store-uri FOLDER`",
                    uri, scheme));
  std::string rest = uri.substr(colon + 1);
  if (rest.rfind("//", 0) == 0) {
    const auto slash = rest.find('/', 2);
    const std::string host = rest.substr(2, slash == std::string::npos ? std::string::npos : slash - 2);
    if (!host.empty() && host != "localhost")
      throw Unsupported(
          fmt::format("MLFLOW_TRACKING_URI '{}': a file: URI on host '{}' is not a local folder", uri, host));
    rest = slash == std::string::npos ? "" : rest.substr(slash);
  }
  const std::string path = percent_decode(rest, uri);
  if (path.empty()) throw InvalidArgument(fmt::format("MLFLOW_TRACKING_URI '{}' names no folder", uri));
  return fs::absolute(path);
}

std::string path_to_file_uri(const fs::path& path) {
  std::string out = "file://";
  for (unsigned char c : fs::absolute(path).lexically_normal().string()) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || c == '/') out += static_cast<char>(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out;
}

std::map<std::string, std::string> read_flat_yaml(const fs::path& path) {
  const std::string text = read_text(path);
  std::vector<std::pair<std::string, std::string>> raw;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#' || line == "---" || line == "...") continue;
    if (line[0] == ' ' || line[0] == '\t') {  // a folded scalar's next line
      const auto first = line.find_first_not_of(" \t");
      if (raw.empty())
        throw CorruptFile(fmt::format("{} line {}: indented line before any key", path.string(), number));
      if (first != std::string::npos) raw.back().second += " " + line.substr(first);
      continue;
    }
    auto sep = line.find(": ");
    if (sep == std::string::npos && line.back() == ':') sep = line.size() - 1;
    if (sep == std::string::npos || sep == 0)
      throw CorruptFile(fmt::format("{} line {}: not a 'key: value' line: '{}'", path.string(), number, line));
    const auto value_at = line.find_first_not_of(' ', sep + 1);
    raw.emplace_back(line.substr(0, sep), value_at == std::string::npos ? "" : line.substr(value_at));
  }
  std::map<std::string, std::string> out;
  for (auto& [key, value] : raw) {
    while (!value.empty() && value.back() == ' ') value.pop_back();
    if (value.size() >= 2 && value.front() == '\'' && value.back() == '\'') {
      std::string s;
      for (size_t i = 1; i + 1 < value.size(); ++i) {
        s += value[i];
        if (value[i] == '\'') ++i;  // '' is one quote
      }
      value = s;
    } else if (!value.empty() && value.front() == '"') {
      try {
        value = nlohmann::json::parse(value).get<std::string>();
      } catch (const std::exception&) {
        throw CorruptFile(
            fmt::format("{}: '{}' holds a double-quoted scalar Kiln cannot read: {}", path.string(), key, value));
      }
    }
    out[key] = value;
  }
  return out;
}

std::string yaml_string(const std::string& s) {
  bool plain = !s.empty() && s.front() != ' ' && s.back() != ' ' && s.back() != ':';
  bool printable_ascii = true;
  for (unsigned char c : s) printable_ascii = printable_ascii && c >= 0x20 && c < 0x7F;
  plain = plain && printable_ascii && std::strchr("-?:,[]{}#&*!|>'\"%@`.+~", s.front()) == nullptr &&
          s.find(": ") == std::string::npos && s.find(" #") == std::string::npos;
  if (plain) {
    // YAML 1.1 would read these words as booleans or null.
    std::string lower = s;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const char* word : {"null", "true", "false", "yes", "no", "on", "off", "y", "n"})
      plain = plain && lower != word;
  }
  if (plain && std::isdigit(static_cast<unsigned char>(s.front()))) {
    // A leading digit: plain only for an id-like mix of digits and letters that no YAML 1.1 int,
    // float, binary or sexagesimal form matches (what PyYAML leaves unquoted in run ids).
    bool letters = false, other = false;
    for (unsigned char c : s) {
      letters = letters || std::isalpha(c);
      other = other || !std::isalnum(c);
    }
    const bool binary = s.size() > 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'x');
    plain = letters && !other && !binary;
  }
  if (plain) return s;
  if (printable_ascii) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
  }
  return nlohmann::json(s).dump();  // a JSON string is a YAML double-quoted scalar
}

void validate_name(const std::string& what, const std::string& name) {
  for (unsigned char c : name) {
    if (!(std::isalnum(c) || c >= 0x80 || std::strchr("/_.- :", c) != nullptr) || c == 0)
      throw InvalidArgument(
          fmt::format("invalid MLflow {} name '{}': names may only contain alphanumerics, underscores "
                      "(_), dashes (-), periods (.), spaces ( ), colons (:) and slashes (/)",
                      what, name));
  }
  // MLflow's path_not_unique: the name is a file path under metrics/, params/ or tags/, so it must
  // normalise to itself (no empty, "." or ".." component, no leading or trailing "/").
  bool bad = name.empty();
  size_t start = 0;
  while (!bad) {
    const auto slash = name.find('/', start);
    const std::string part = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    bad = part.empty() || part == "." || part == "..";
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (bad)
    throw InvalidArgument(
        fmt::format("invalid MLflow {} name '{}': names are file paths in the store and must not have "
                    "empty, '.' or '..' parts or a leading or trailing '/'",
                    what, name));
  if (code_points(name) > kMaxKeyLength)
    throw InvalidArgument(fmt::format("MLflow {} name '{}' has {} characters; MLflow allows at most {}", what, name,
                                      code_points(name), kMaxKeyLength));
}

FileStore::FileStore(fs::path root) : root_(std::move(root)) {
  const bool existed = fs::exists(root_);
  make_dirs(root_ / ".trash");
  // MLflow makes the Default experiment when it makes the store.
  if (!existed) create_experiment("0", "Default");
}

void FileStore::create_experiment(const std::string& id, const std::string& name) {
  const fs::path dir = root_ / id;
  make_dirs(dir);
  const int64_t now = now_millis();
  write_file_atomically(
      (dir / "meta.yaml").string(),
      fmt::format("artifact_location: {}\ncreation_time: {}\nexperiment_id: {}\nlast_update_time: {}\n"
                  "lifecycle_stage: active\nname: {}\n",
                  yaml_string(path_to_file_uri(dir)), now, yaml_string(id), now, yaml_string(name)));
}

std::string FileStore::experiment_by_name(const std::string& name) {
  if (name.empty())
    throw InvalidArgument("MLFLOW_EXPERIMENT_NAME is empty: name an experiment or unset it for 'Default'");
  for (const fs::path& dir : experiment_dirs(root_))
    if (experiment_name(dir) == name) return dir.filename().string();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_ / ".trash", ec))
    if (entry.is_directory() && experiment_name(entry.path()) == name)
      throw InvalidArgument(
          fmt::format("MLflow experiment '{}' was deleted (it is in {}): restore it, remove it from "
                      "the trash, or choose another MLFLOW_EXPERIMENT_NAME",
                      name, (root_ / ".trash").string()));
  if (name == "Default" && !fs::exists(root_ / "0")) {
    create_experiment("0", name);
    return "0";
  }
  // MLflow's _generate_unique_integer_id: 18 decimal digits without a leading zero.
  std::random_device rd;
  std::mt19937_64 gen((uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(now_millis()));
  std::string id;
  do {
    id = std::to_string(std::uniform_int_distribution<uint64_t>(100000000000000000ULL, 999999999999999999ULL)(gen));
  } while (fs::exists(root_ / id) || fs::exists(root_ / ".trash" / id));
  create_experiment(id, name);
  return id;
}

RunInfo FileStore::create_run(const std::string& experiment_id, const std::string& run_name, const std::string& user,
                              int64_t start_time) {
  const fs::path exp_meta = root_ / experiment_id / "meta.yaml";
  const auto meta = read_flat_yaml(exp_meta);
  if (auto it = meta.find("lifecycle_stage"); it != meta.end() && it->second != "active")
    throw InvalidArgument(
        fmt::format("MLflow experiment {} is {}: cannot create a run in it", experiment_id, it->second));
  RunInfo run;
  do {
    run.run_id = random_run_id();
  } while (fs::exists(root_ / experiment_id / run.run_id));
  run.experiment_id = experiment_id;
  run.run_name = run_name;
  run.user_id = user;
  run.start_time = start_time;
  run.artifact_uri = str_field(meta, "artifact_location", exp_meta) + "/" + run.run_id + "/artifacts";
  const fs::path dir = run_dir(run);
  make_dirs(dir);
  write_run_info(run);
  for (const char* sub : {"metrics", "params", "artifacts"}) make_dirs(dir / sub);
  set_tag(run, "mlflow.runName", run_name);
  return run;
}

RunInfo FileStore::find_run(const std::string& run_id) const {
  bool valid = !run_id.empty() && run_id.size() <= 256 && std::isalnum(static_cast<unsigned char>(run_id[0]));
  for (unsigned char c : run_id) valid = valid && (std::isalnum(c) || c == '_' || c == '-');
  if (!valid) throw InvalidArgument(fmt::format("MLFLOW_RUN_ID '{}' is not an MLflow run id", run_id));
  for (const fs::path& exp : experiment_dirs(root_)) {
    const fs::path path = exp / run_id / "meta.yaml";
    if (!fs::exists(path)) continue;
    const auto meta = read_flat_yaml(path);
    RunInfo run;
    run.run_id = run_id;
    run.experiment_id = str_field(meta, "experiment_id", path);
    if (run.experiment_id != exp.filename().string())
      throw CorruptFile(fmt::format("{}: experiment_id '{}' is not its folder's", path.string(), run.experiment_id));
    run.run_name = meta.count("run_name") ? meta.at("run_name") : "";
    run.user_id = meta.count("user_id") ? meta.at("user_id") : "";
    run.artifact_uri = str_field(meta, "artifact_uri", path);
    run.lifecycle_stage = meta.count("lifecycle_stage") ? meta.at("lifecycle_stage") : "active";
    run.status = static_cast<RunStatus>(meta.count("status") ? int_field(meta, "status", path) : 1);
    run.start_time =
        meta.count("start_time") && meta.at("start_time") != "null" ? int_field(meta, "start_time", path) : 0;
    if (meta.count("end_time") && meta.at("end_time") != "null") run.end_time = int_field(meta, "end_time", path);
    if (run.lifecycle_stage != "active")
      throw InvalidArgument(
          fmt::format("MLFLOW_RUN_ID '{}': the run is {} ({})", run_id, run.lifecycle_stage, path.string()));
    return run;
  }
  throw InvalidArgument(fmt::format("MLFLOW_RUN_ID '{}': no such run in the MLflow store {}", run_id, root_.string()));
}

void FileStore::write_run_info(const RunInfo& run) const {
  // MLflow's _make_persisted_run_info_dict, keys sorted as its write_yaml sorts them.
  const std::string end = run.end_time ? std::to_string(*run.end_time) : "null";
  write_file_atomically(
      (run_dir(run) / "meta.yaml").string(),
      fmt::format("artifact_uri: {}\nend_time: {}\nentry_point_name: ''\nexperiment_id: {}\nlifecycle_stage: {}\n"
                  "run_id: {}\nrun_name: {}\nrun_uuid: {}\nsource_name: ''\nsource_type: {}\nsource_version: ''\n"
                  "start_time: {}\nstatus: {}\ntags: []\nuser_id: {}\n",
                  yaml_string(run.artifact_uri), end, yaml_string(run.experiment_id), yaml_string(run.lifecycle_stage),
                  yaml_string(run.run_id), yaml_string(run.run_name), yaml_string(run.run_id), kSourceTypeLocal,
                  run.start_time, static_cast<int>(run.status), yaml_string(run.user_id)));
}

void FileStore::log_param(const RunInfo& run, const std::string& key, const std::string& value) const {
  validate_name("param", key);
  const fs::path path = run_dir(run) / "params" / key;
  make_dirs(path.parent_path());
  write_small_file(path, value);
}

std::optional<std::string> FileStore::param(const RunInfo& run, const std::string& key) const {
  const fs::path path = run_dir(run) / "params" / key;
  if (!fs::is_regular_file(path)) return std::nullopt;
  return read_text(path);
}

void FileStore::set_tag(const RunInfo& run, const std::string& key, const std::string& value) const {
  validate_name("tag", key);
  const fs::path path = run_dir(run) / "tags" / key;
  make_dirs(path.parent_path());
  write_small_file(path, truncate_code_points(value, kMaxTagValueLength));
}

void FileStore::log_metric(const RunInfo& run, const std::string& key, double value, int64_t timestamp_ms,
                           int64_t step) const {
  validate_name("metric", key);
  const fs::path path = run_dir(run) / "metrics" / key;
  make_dirs(path.parent_path());
  const std::string line = fmt::format("{} {} {}\n", timestamp_ms, python_float(value), step);
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (!f) throw IOError(fmt::format("{}: cannot open for appending: {}", path.string(), std::strerror(errno)));
  const bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size() && std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !ok)
    throw IOError(fmt::format("{}: cannot append a metric value: {}", path.string(), std::strerror(ok ? errno : err)));
}

int64_t now_millis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string random_run_id() {
  std::random_device rd;
  std::array<unsigned char, 16> bytes{};
  for (auto& b : bytes) b = static_cast<unsigned char>(rd());
  bytes[6] = static_cast<unsigned char>((bytes[6] & 0x0F) | 0x40);  // version 4
  bytes[8] = static_cast<unsigned char>((bytes[8] & 0x3F) | 0x80);  // RFC 4122 variant
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

std::string random_run_name() {
  // MLflow's shape (predicate-noun-integer in [0, 1000], at most 20 characters); Kiln's own words.
  static const char* const kAdjectives[] = {
      "amber",  "bold",   "brave",  "bright", "calm",    "clever", "crisp", "daring", "eager",  "fair",
      "fleet",  "gentle", "glad",   "grand",  "happy",   "jolly",  "keen",  "kind",   "lively", "lucky",
      "merry",  "mighty", "nimble", "noble",  "patient", "plucky", "proud", "quick",  "quiet",  "rapid",
      "serene", "sharp",  "shiny",  "smart",  "steady",  "sunny",  "swift", "tidy",   "vivid",  "witty"};
  static const char* const kNouns[] = {"badger", "bison",  "crane", "eagle", "falcon", "ferret", "gecko",  "heron",
                                       "ibex",   "jackal", "koala", "lemur", "lion",   "llama",  "lynx",   "marten",
                                       "mole",   "moose",  "newt",  "otter", "owl",    "panda",  "pike",   "puffin",
                                       "quokka", "raven",  "robin", "seal",  "shrew",  "sloth",  "stork",  "swan",
                                       "tapir",  "tiger",  "toad",  "trout", "viper",  "vole",   "walrus", "wren"};
  std::random_device rd;
  std::mt19937 gen(rd());
  std::string name;
  for (int attempt = 0; attempt < 10; ++attempt) {
    name = fmt::format("{}-{}-{}", kAdjectives[gen() % std::size(kAdjectives)], kNouns[gen() % std::size(kNouns)],
                       std::uniform_int_distribution<int>(0, 1000)(gen));
    if (name.size() <= 20) return name;
  }
  return name.substr(0, 20);
}

std::string python_float(double v) {
  if (std::isnan(v)) return "nan";  // Python prints every NaN as nan, whatever its sign bit
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // fmt's shortest form switches to an exponent where Python's repr does (below 1e-4, from 1e16)
  // and writes it the same way (1e-05, 1e+16); Python adds ".0" to an integral fixed value.
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace kiln::trainer::mlflow
