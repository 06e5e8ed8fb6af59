// JSON Lines files as datasets: one object per line, one item per object, token sequences of any
// length. Every error names the file and the line.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "core/file_io.h"
#include "core/json_text.h"
#include "kiln/data.h"

namespace kiln::data {
namespace {

using nlohmann::json;

std::string column_name(const std::string& key) { return key == "label" || key == "label_ids" ? "labels" : key; }

struct Line {
  size_t number = 0;
  json object;
};

class JsonlReader {
 public:
  JsonlReader(std::string path, const JsonlOptions& options) : path_(std::move(path)), options_(options) {}

  std::shared_ptr<ExampleListDataset> read() {
    const std::string text = read_file_bytes(path_, "JSON Lines file");
    std::vector<Line> lines = parse_lines(text);
    if (lines.empty()) throw CorruptFile(fmt::format("'{}': no items (the file has no JSON objects)", path_));
    std::vector<Example> items;
    items.reserve(lines.size());
    for (const Line& line : lines) {
      Example item;
      for (const auto& [key, value] : line.object.items()) {
        if (!wanted(key) || (options_.skip_text && has_string(value))) continue;
        const std::string name = column_name(key);
        Shape shape;
        shape_of(value, shape, line.number, key);
        Tensor t = Tensor::empty(floats_.count(name) ? DType::Float32 : DType::Int64, shape);
        int64_t at = 0;
        fill(value, t, at, line.number, key);
        item.emplace(name, std::move(t));
      }
      items.push_back(std::move(item));
    }
    return std::make_shared<ExampleListDataset>(std::move(items));
  }

 private:
  [[noreturn]] void fail(size_t line, const std::string& what) const {
    throw CorruptFile(fmt::format("'{}' line {}: {}", path_, line, what));
  }

  bool wanted(const std::string& key) const {
    if (options_.columns.empty()) return true;
    const auto& c = options_.columns;
    return std::find(c.begin(), c.end(), key) != c.end() || std::find(c.begin(), c.end(), column_name(key)) != c.end();
  }

  std::vector<Line> parse_lines(const std::string& text) {
    std::vector<Line> lines;
    std::set<std::string> first_columns;
    size_t number = 0;
    for (size_t pos = 0; pos < text.size();) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      ++number;
      std::string_view line(text.data() + pos, end - pos);
      pos = end + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
      json object = parse_json(line, fmt::format("'{}' line {}", path_, number));
      if (!object.is_object())
        fail(number, fmt::format("a {} is not a JSON object (one item per line)", object.type_name()));
      std::set<std::string> columns;
      for (const auto& [key, value] : object.items()) {
        if (!wanted(key) || (options_.skip_text && has_string(value))) continue;
        if (!columns.insert(column_name(key)).second)
          fail(number, fmt::format("'{}' and another key are both read as column '{}'", key, column_name(key)));
        if (is_float(value, number, key)) floats_.insert(column_name(key));
      }
      if (lines.empty()) {
        if (columns.empty())
          fail(number, options_.columns.empty() ? std::string("the object has no keys")
                                                : fmt::format("the object has none of the columns asked for ({})",
                                                              fmt::join(options_.columns, ", ")));
        first_columns = columns;
      } else if (columns != first_columns) {
        fail(number, fmt::format("its columns [{}] differ from line {}'s [{}]", fmt::join(columns, ", "),
                                 lines.front().number, fmt::join(first_columns, ", ")));
      }
      lines.push_back({number, std::move(object)});
    }
    return lines;
  }

  static bool has_string(const json& v) {
    if (v.is_array()) return std::any_of(v.begin(), v.end(), [](const json& e) { return has_string(e); });
    return v.is_string();
  }

  // Whether a value holds a non-integral number; CorruptFile for a value that is not numeric.
  bool is_float(const json& v, size_t line, const std::string& key) const {
    if (v.is_array()) {
      bool any = false;
      for (const auto& e : v) any = is_float(e, line, key) || any;
      return any;
    }
    if (v.is_number_float()) return true;
    if (v.is_number() || v.is_boolean()) return false;
    if (v.is_string())
      fail(line, fmt::format("column '{}' holds a string; Kiln datasets hold numbers (tokenize the text first, or "
                             "leave the column out with the columns option)",
                             key));
    fail(line, fmt::format("column '{}' holds a {}, not a number or an array of numbers", key, v.type_name()));
  }

  void shape_of(const json& v, Shape& shape, size_t line, const std::string& key) const {
    if (!v.is_array()) return;
    shape.push_back(static_cast<int64_t>(v.size()));
    if (v.empty()) return;
    Shape inner;
    shape_of(v[0], inner, line, key);
    for (size_t i = 1; i < v.size(); ++i) {
      Shape other;
      shape_of(v[i], other, line, key);
      if (other != inner)
        fail(line, fmt::format("column '{}' is a ragged array: element {} has shape {} but element 0 has {}", key, i,
                               to_string(other), to_string(inner)));
    }
    shape.insert(shape.end(), inner.begin(), inner.end());
  }

  void fill(const json& v, Tensor& t, int64_t& at, size_t line, const std::string& key) const {
    if (v.is_array()) {
      for (const auto& e : v) fill(e, t, at, line, key);
      return;
    }
    const std::string what = fmt::format("'{}' line {}: column '{}'", path_, line, key);
    if (t.dtype() == DType::Float32)
      t.data<float>()[at++] = v.is_boolean() ? (v.get<bool>() ? 1.0f : 0.0f) : json_float(v, what);
    else t.data<int64_t>()[at++] = v.is_boolean() ? (v.get<bool>() ? 1 : 0) : json_int64(v, what);
  }

  std::string path_;
  const JsonlOptions& options_;
  std::set<std::string> floats_;  // columns with a non-integral number somewhere
};

}  // namespace

std::shared_ptr<ExampleListDataset> load_jsonl(const std::string& path, const JsonlOptions& options) {
  return JsonlReader(path, options).read();
}

}  // namespace kiln::data
