// Numeric CSV files as datasets. The tokenizer follows RFC 4180: fields may be quoted, a quote
// inside a quoted field is doubled, quoted fields may span lines; LF and CRLF end records. Every
// error names the file and the line it is on.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/file_io.h"
#include "kiln/data.h"

namespace kiln::data {
namespace {

struct Field {
  std::string text;
  size_t line = 0;  // 1-based line where the field starts
};

class CsvTokenizer {
 public:
  CsvTokenizer(const std::string& bytes, const std::string& path, char delimiter)
      : s_(bytes), path_(path), delim_(delimiter) {
    if (s_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;  // UTF-8 byte order mark
  }

  // The next record, skipping empty lines; false at the end of the file.
  bool next(std::vector<Field>& row) {
    row.clear();
    while (pos_ < s_.size() && (s_[pos_] == '\n' || s_[pos_] == '\r')) end_line();
    if (pos_ >= s_.size()) return false;
    for (;;) {
      row.push_back(field());
      if (pos_ >= s_.size()) return true;
      if (s_[pos_] == delim_) {
        ++pos_;
        continue;
      }
      end_line();  // at '\n' or '\r'
      return true;
    }
  }
  size_t line() const { return line_; }

 private:
  void end_line() {
    if (s_[pos_] == '\r' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '\n') ++pos_;
    ++pos_;
    ++line_;
  }
  Field field() {
    Field f;
    f.line = line_;
    // Spaces before an opening quote are allowed (as Python's csv with skipinitialspace).
    size_t p = pos_;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
    if (p < s_.size() && s_[p] == '"') {
      pos_ = p + 1;
      for (;;) {
        if (pos_ >= s_.size())
          throw CorruptFile(
              fmt::format("'{}' line {}: unterminated quoted field (the file ends at line {})", path_, f.line, line_));
        const char c = s_[pos_++];
        if (c == '"') {
          if (pos_ < s_.size() && s_[pos_] == '"') {
            f.text.push_back('"');
            ++pos_;
            continue;
          }
          break;
        }
        if (c == '\n') ++line_;
        f.text.push_back(c);
      }
      while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
      if (pos_ < s_.size() && s_[pos_] != delim_ && s_[pos_] != '\n' && s_[pos_] != '\r')
        throw CorruptFile(fmt::format("'{}' line {}: unexpected '{}' after a closing quote", path_, line_, s_[pos_]));
      return f;
    }
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != delim_ && s_[pos_] != '\n' && s_[pos_] != '\r') ++pos_;
    f.text = s_.substr(start, pos_ - start);
    return f;
  }

  const std::string& s_;
  const std::string& path_;
  char delim_;
  size_t pos_ = 0;
  size_t line_ = 1;
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The label column's index among `count` columns: a header name first, then a (negative) index.
std::optional<size_t> label_index(const CsvOptions& o, const std::vector<std::string>& names, const std::string& path) {
  if (o.label_column.empty()) return std::nullopt;
  for (size_t i = 0; i < names.size(); ++i)
    if (o.header && names[i] == o.label_column) return i;
  int64_t index = 0;
  const char* end = o.label_column.data() + o.label_column.size();
  const auto [ptr, ec] = std::from_chars(o.label_column.data(), end, index);
  const auto count = static_cast<int64_t>(names.size());
  if (ec != std::errc() || ptr != end)
    throw InvalidArgument(
        fmt::format("load_csv('{}'): label_column '{}' is not a {}column index", path, o.label_column,
                    o.header ? "header name (" + fmt::format("{}", fmt::join(names, ", ")) + ") or " : ""));
  if (index < -count || index >= count)
    throw InvalidArgument(
        fmt::format("load_csv('{}'): label_column index {} is out of range for {} columns", path, index, count));
  return static_cast<size_t>(index < 0 ? index + count : index);
}

double parse_number(const Field& f, const std::string& column, const std::string& path) {
  std::string t = trim(f.text);
  const char* b = t.data();
  const char* e = t.data() + t.size();
  if (b != e && *b == '+') ++b;  // from_chars rejects an explicit plus sign
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(b, e, v);
  if (t.empty())
    throw CorruptFile(fmt::format(
        "'{}' line {}, column {}: empty field (Kiln reads numeric CSV with no missing values)", path, f.line, column));
  if (ec == std::errc::result_out_of_range)
    throw CorruptFile(
        fmt::format("'{}' line {}, column {}: '{}' is out of range for a double", path, f.line, column, t));
  if (ec != std::errc() || ptr != e)
    throw CorruptFile(fmt::format("'{}' line {}, column {}: '{}' is not a number", path, f.line, column, t));
  return v;
}

}  // namespace

std::shared_ptr<TensorDataset> load_csv(const std::string& path, const CsvOptions& options) {
  if (options.delimiter == '"' || options.delimiter == '\n' || options.delimiter == '\r')
    throw InvalidArgument(fmt::format("load_csv('{}'): the delimiter cannot be a quote or a line end", path));
  if (options.input_column.empty() || options.input_column == options.labels_column)
    throw InvalidArgument(
        fmt::format("load_csv('{}'): input_column '{}' must be non-empty and differ from labels_column", path,
                    options.input_column));
  const std::string bytes = read_file_bytes(path, "CSV file");
  CsvTokenizer tok(bytes, path, options.delimiter);
  std::vector<Field> row;
  std::vector<std::string> names;
  size_t first_line = 1;
  if (options.header) {
    if (!tok.next(row)) throw CorruptFile(fmt::format("'{}' is empty: no header line", path));
    for (const Field& f : row) {
      names.push_back(trim(f.text));
      if (std::count(names.begin(), names.end(), names.back()) > 1)
        throw CorruptFile(fmt::format("'{}' line {}: the header names column '{}' twice", path, f.line, names.back()));
    }
    first_line = row.front().line;
  }
  std::vector<float> features;
  std::vector<double> labels;
  std::optional<size_t> label;
  size_t columns = names.size();
  size_t rows = 0;
  while (tok.next(row)) {
    if (rows == 0 && !options.header) {
      columns = row.size();
      first_line = row.front().line;
      for (size_t i = 0; i < columns; ++i) names.push_back(fmt::format("{}", i));
    }
    if (rows == 0) label = label_index(options, names, path);
    if (row.size() != columns)
      throw CorruptFile(fmt::format("'{}' line {}: {} fields, expected {} (as line {})", path, row.front().line,
                                    row.size(), columns, first_line));
    for (size_t c = 0; c < columns; ++c) {
      const std::string column = options.header ? fmt::format("'{}'", names[c]) : names[c];
      const double v = parse_number(row[c], column, path);
      if (label && c == *label) labels.push_back(v);
      else features.push_back(static_cast<float>(v));
    }
    ++rows;
  }
  if (rows == 0) throw CorruptFile(fmt::format("'{}' has no data rows (it ends at line {})", path, tok.line()));

  const auto n = static_cast<int64_t>(rows);
  const int64_t f = static_cast<int64_t>(columns) - (label ? 1 : 0);
  if (f == 0) throw InvalidArgument(fmt::format("load_csv('{}'): no feature columns besides the label", path));
  std::map<std::string, Tensor> tensors;
  tensors.emplace(options.input_column, Tensor::from_vector<float>({n, f}, features));
  if (label) {
    // Class indices stay integers (what CrossEntropyLoss wants); anything else is a regression target.
    bool integral = true;
    for (double v : labels) integral = integral && std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e18;
    if (integral) {
      std::vector<int64_t> ints(labels.begin(), labels.end());
      tensors.emplace(options.labels_column, Tensor::from_vector<int64_t>({n}, ints));
    } else {
      tensors.emplace(options.labels_column,
                      Tensor::from_vector<float>({n}, std::vector<float>(labels.begin(), labels.end())));
    }
  }
  return std::make_shared<TensorDataset>(std::move(tensors));
}

}  // namespace kiln::data
