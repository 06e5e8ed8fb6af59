// TrainingArguments in and out: the HfArgumentParser-style command line, JSON objects and files,
// and training_args.json. The per-field conversions live in the field table
// (training_args_fields.cpp); this file only walks argv and JSON objects.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/json_text.h"
#include "kiln/error.h"
#include "kiln/training_args.h"
#include "trainer/args/training_args_fields.h"

namespace kiln::trainer {
namespace {

using detail::Arity;
using detail::FieldSpec;

// argparse's rule: "--x" and "-x" are options; "-", "-5" and "-.5" are values.
bool is_option(const std::string& token) {
  if (token.size() < 2 || token[0] != '-') return false;
  if (token[1] == '-') return token.size() > 2;
  return !(std::isdigit(static_cast<unsigned char>(token[1])) || token[1] == '.');
}

// Python's repr of a list of strings: ['a', 'b'].
std::string python_list(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += fmt::format("{}'{}'", out.empty() ? "" : ", ", item);
  return "[" + out + "]";
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The known option nearest to `name` (without dashes), if it is near enough to be a typo.
std::optional<std::string> closest_option(const std::string& name) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  auto consider = [&](const std::string& candidate) {
    size_t d = edit_distance(name, candidate);
    if (d < best_distance) best_distance = d, best = candidate;
  };
  for (const FieldSpec& spec : detail::fields()) {
    consider(spec.name);
    if (spec.negatable) consider("no_" + spec.name);
  }
  return best;
}

std::string underscores(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace

TrainingArguments TrainingArguments::parse_args(const std::vector<std::string>& argv,
                                                std::vector<std::string>* remaining) {
  TrainingArguments args;
  std::vector<std::string> unused;
  std::vector<std::string> suggestions;
  size_t i = 0;
  auto take_values = [&](size_t max_count) {
    std::vector<std::string> values;
    while (values.size() < max_count && i < argv.size() && !is_option(argv[i])) values.push_back(argv[i++]);
    return values;
  };
  while (i < argv.size()) {
    const std::string& token = argv[i++];
    if (!is_option(token)) {
      unused.push_back(token);
      continue;
    }
    size_t eq = token.find('=');
    size_t start = token[1] == '-' ? 2 : 1;
    std::string name = underscores(token.substr(start, eq == std::string::npos ? eq : eq - start));
    std::optional<std::string> inline_value;
    if (eq != std::string::npos) inline_value = token.substr(eq + 1);
    const FieldSpec* spec = token[1] == '-' ? detail::find_field(name) : nullptr;
    // --no_<flag> (and --no-<flag>) for booleans whose default is true, as HfArgumentParser adds.
    if (!spec && token[1] == '-' && name.starts_with("no_") && !inline_value) {
      if (const FieldSpec* negated = detail::find_field(name.substr(3)); negated && negated->negatable) {
        negated->clear(args);
        continue;
      }
    }
    if (!spec) {
      unused.push_back(token);
      for (const std::string& value : take_values(SIZE_MAX)) unused.push_back(value);
      if (auto near = closest_option(name)) suggestions.push_back(fmt::format("--{} for {}", *near, token));
      continue;
    }
    const std::string where = "argument --" + spec->name;
    std::vector<std::string> values;
    if (inline_value) {
      values.push_back(*inline_value);
    } else if (spec->arity == Arity::flag) {
      values = take_values(1);
    } else if (spec->arity == Arity::one) {
      values = take_values(1);
      if (values.empty()) throw InvalidArgument(where + ": expected one argument");
    } else {
      values = take_values(SIZE_MAX);
      if (values.empty()) throw InvalidArgument(where + ": expected at least one argument");
    }
    spec->set_text(args, values, where);
  }
  if (!unused.empty()) {
    if (!remaining) {
      std::string hint = suggestions.empty() ? "" : fmt::format(". Did you mean {}?", fmt::join(suggestions, ", "));
      throw InvalidArgument(fmt::format("Some specified arguments are not used by the HfArgumentParser: {}{}",
                                        python_list(unused), hint));
    }
    remaining->insert(remaining->end(), unused.begin(), unused.end());
  }
  args.validate();
  return args;
}

TrainingArguments TrainingArguments::from_json(const nlohmann::json& json, bool allow_extra_keys) {
  if (!json.is_object())
    throw InvalidArgument(fmt::format("training arguments must be a JSON object, got {}", json.dump()));
  std::vector<std::string> unused;
  for (const auto& [key, value] : json.items())
    if (!detail::find_field(key)) unused.push_back(key);
  if (!unused.empty() && !allow_extra_keys) {
    std::sort(unused.begin(), unused.end());
    throw InvalidArgument(fmt::format("Some keys are not used by the HfArgumentParser: {}", python_list(unused)));
  }
  TrainingArguments args;
  // In table order, so that a non-null evaluation_strategy overrides eval_strategy as in HF v4.
  for (const FieldSpec& spec : detail::fields())
    if (auto it = json.find(spec.name); it != json.end()) spec.set_json(args, *it, "key '" + spec.name + "'");
  args.validate();
  return args;
}

TrainingArguments TrainingArguments::from_json_file(const std::string& path, bool allow_extra_keys) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IOError(fmt::format("{}: cannot open the training arguments file", path));
  std::stringstream text;
  text << in.rdbuf();
  check_json_limits(text.str(), path);
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) throw InvalidArgument(fmt::format("{}: not a valid JSON file", path));
  try {
    return from_json(json, allow_extra_keys);
  } catch (Error& e) {
    e.add_context(path + ": ");
    throw;
  }
}

nlohmann::json TrainingArguments::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const FieldSpec& spec : detail::fields())
    if (spec.serialized) out[spec.name] = spec.get(*this);
  return out;
}

std::string TrainingArguments::to_json_string() const { return to_json().dump(2); }

void TrainingArguments::save(const std::string& path) const { write_file_atomically(path, to_json_string() + "\n"); }

std::vector<std::string> TrainingArguments::option_names() {
  std::vector<std::string> names;
  for (const FieldSpec& spec : detail::fields()) names.push_back(spec.name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kiln::trainer
