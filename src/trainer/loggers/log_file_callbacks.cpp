// The file loggers of report_to: "jsonl" (JsonLinesCallback) and "csv" (CsvLoggerCallback). Both
// share the resume rule: at on_train_begin, entries with a step above state.global_step belong to
// the part of an interrupted run that the resumed checkpoint does not hold, and are dropped, so
// that the resumed run's file equals the one an uninterrupted run writes.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "core/atomic_file.h"
#include "core/json_text.h"
#include "kiln/error.h"
#include "kiln/integrations.h"

namespace kiln::trainer {

namespace fs = std::filesystem;

namespace {

// The file's bytes, or nothing when it does not exist.
std::optional<std::string> read_if_exists(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IOError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IOError(fmt::format("{}: cannot read", path));
  return ss.str();
}

void make_parent(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw IOError(fmt::format("{}: cannot create the folder: {}", parent.string(), ec.message()));
}

void append_line(const std::string& path, const std::string& line) {
  make_parent(path);
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (!f) throw IOError(fmt::format("{}: cannot open for appending: {}", path, std::strerror(errno)));
  const bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size() && std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !ok)
    throw IOError(fmt::format("{}: cannot append a log line: {}", path, std::strerror(err)));
}

// ---- CSV (RFC 4180) ----

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

struct CsvRecord {
  int line = 0;  // the line it starts on (1-based)
  std::vector<std::string> fields;
};

std::vector<CsvRecord> parse_csv(const std::string& text, const std::string& path) {
  std::vector<CsvRecord> records;
  CsvRecord rec;
  std::string field;
  int line = 1;
  rec.line = 1;
  bool quoted = false, in_record = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
        if (i + 1 < text.size() && text[i + 1] != ',' && text[i + 1] != '\n' && text[i + 1] != '\r')
          throw CorruptFile(fmt::format("{} line {}: text after a closing quote", path, line));
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"' && field.empty()) {
      quoted = in_record = true;
    } else if (c == ',') {
      rec.fields.push_back(std::move(field));
      field.clear();
      in_record = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (in_record || !field.empty()) {
        rec.fields.push_back(std::move(field));
        records.push_back(std::move(rec));
      }
      field.clear();
      rec = CsvRecord{};
      rec.line = ++line;
      in_record = false;
    } else {
      field += c;
      in_record = true;
    }
  }
  if (quoted) throw CorruptFile(fmt::format("{} line {}: a quoted field never ends", path, rec.line));
  if (in_record || !field.empty()) {
    rec.fields.push_back(std::move(field));
    records.push_back(std::move(rec));
  }
  return records;
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  out = v;
  return true;
}

bool is_number(const std::string& s) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return *end == '\0';
}

struct JsonLinesRegistrar {
  JsonLinesRegistrar() {
    register_integration("jsonl", [] { return std::make_shared<JsonLinesCallback>(); });
    register_integration("csv", [] { return std::make_shared<CsvLoggerCallback>(); });
  }
} const log_file_registrar;

}  // namespace

// ---- JsonLinesCallback ----

std::string JsonLinesCallback::path_for(const Args& args) {
  return (fs::path(args.output_dir) / "logs.jsonl").string();
}

void JsonLinesCallback::on_train_begin(const Args& args, const TrainerState& state, TrainerControl&,
                                       const CallbackContext&) {
  if (!state.is_world_process_zero) return;
  const std::string path = path_for(args);
  auto text = read_if_exists(path);
  if (!text) return;
  std::string kept;
  bool dropped = false;
  // A last line without its newline is a write a kill cut short: the resumed run logs it again.
  if (!text->empty() && text->back() != '\n') {
    text->resize(text->rfind('\n') == std::string::npos ? 0 : text->rfind('\n') + 1);
    dropped = true;
  }
  std::istringstream lines(*text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.empty()) continue;
    nlohmann::json entry;
    try {
      check_json_limits(line, path);
      entry = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw CorruptFile(
          fmt::format("{} line {}: not JSON ({}); fix or remove the file to train", path, number, e.what()));
    }
    if (!entry.is_object() || !entry.contains("step") || !entry["step"].is_number_integer())
      throw CorruptFile(
          fmt::format("{} line {}: not a log object with an integer \"step\"; fix or remove the file to "
                      "train",
                      path, number));
    if (entry["step"].get<int64_t>() > state.global_step) {
      dropped = true;
    } else {
      kept += line + "\n";  // the line's own bytes: a rewrite changes nothing else
    }
  }
  if (dropped) write_file_atomically(path, kept);
}

void JsonLinesCallback::on_log(const Args& args, const TrainerState& state, TrainerControl&,
                               const CallbackContext& ctx) {
  if (!state.is_world_process_zero || !ctx.logs) return;
  // ordered_json keeps the logs' order; NaN and infinities become null (strict JSON).
  nlohmann::ordered_json entry = nlohmann::ordered_json::object();
  for (const auto& [key, value] : *ctx.logs) entry[key] = value;
  entry["step"] = state.global_step;
  append_line(path_for(args), entry.dump() + "\n");
}

// ---- CsvLoggerCallback ----

struct CsvLoggerCallback::Table {
  struct Row {
    int64_t step = 0;
    std::map<std::string, std::string> cells;  // key -> the number's text
  };
  std::vector<std::string> columns;  // after "step", in first-seen order
  std::vector<Row> rows;

  std::string text() const {
    std::string out = "step";
    for (const auto& c : columns) out += "," + csv_field(c);
    out += "\n";
    for (const Row& row : rows) {
      out += std::to_string(row.step);
      for (const auto& c : columns) {
        auto it = row.cells.find(c);
        out += "," + (it == row.cells.end() ? std::string() : csv_field(it->second));
      }
      out += "\n";
    }
    return out;
  }
};

CsvLoggerCallback::CsvLoggerCallback() : table_(std::make_unique<Table>()) {}
CsvLoggerCallback::~CsvLoggerCallback() = default;

std::string CsvLoggerCallback::path_for(const Args& args) { return (fs::path(args.output_dir) / "logs.csv").string(); }

void CsvLoggerCallback::load(const std::string& path) {
  auto table = std::make_unique<Table>();
  if (const auto text = read_if_exists(path)) {
    const auto records = parse_csv(*text, path);
    if (!records.empty()) {
      const auto& header = records[0].fields;
      if (header.empty() || header[0] != "step")
        throw CorruptFile(
            fmt::format("{} line 1: the header does not start with \"step\"; fix or remove the file to "
                        "train",
                        path));
      table->columns.assign(header.begin() + 1, header.end());
      for (size_t r = 1; r < records.size(); ++r) {
        const auto& rec = records[r];
        if (rec.fields.size() != header.size())
          throw CorruptFile(
              fmt::format("{} line {}: {} fields where the header has {}; fix or remove the file to train", path,
                          rec.line, rec.fields.size(), header.size()));
        Table::Row row;
        if (!parse_int(rec.fields[0], row.step))
          throw CorruptFile(fmt::format("{} line {}: step '{}' is not an integer; fix or remove the file to train",
                                        path, rec.line, rec.fields[0]));
        for (size_t c = 1; c < header.size(); ++c) {
          const std::string& cell = rec.fields[c];
          if (cell.empty()) continue;
          if (!is_number(cell))
            throw CorruptFile(
                fmt::format("{} line {}: '{}' of column '{}' is not a number; fix or remove the file to "
                            "train",
                            path, rec.line, cell, header[c]));
          row.cells[header[c]] = cell;
        }
        table->rows.push_back(std::move(row));
      }
    }
  }
  table_ = std::move(table);
  loaded_path_ = path;
}

void CsvLoggerCallback::on_train_begin(const Args& args, const TrainerState& state, TrainerControl&,
                                       const CallbackContext&) {
  if (!state.is_world_process_zero) return;
  const std::string path = path_for(args);
  load(path);  // from disk again: the file is the truth at the start of every train()
  auto& rows = table_->rows;
  const auto before = rows.size();
  rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const Table::Row& r) { return r.step > state.global_step; }),
             rows.end());
  if (rows.size() != before) write_file_atomically(path, table_->text());
}

void CsvLoggerCallback::on_log(const Args& args, const TrainerState& state, TrainerControl&,
                               const CallbackContext& ctx) {
  if (!state.is_world_process_zero || !ctx.logs) return;
  const std::string path = path_for(args);
  if (loaded_path_ != path) load(path);  // a log before train() (evaluate()) keeps what the file has
  Table::Row row;
  row.step = state.global_step;
  for (const auto& [key, value] : *ctx.logs) {
    if (key == "step") continue;  // the first column already is the step
    if (std::find(table_->columns.begin(), table_->columns.end(), key) == table_->columns.end())
      table_->columns.push_back(key);
    row.cells[key] = fmt::format("{}", value);
  }
  table_->rows.push_back(std::move(row));
  make_parent(path);
  write_file_atomically(path, table_->text());
}

}  // namespace kiln::trainer
