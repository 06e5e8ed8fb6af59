// The field registry behind TrainingArguments' parsers and serialiser: one entry per option, made
// from a member pointer and a codec for its type, so that the command line, JSON input and JSON
// output share one list of names and one conversion per type (adding a field is one line in
// training_args_fields.cpp).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/training_args.h"

namespace kiln::trainer::detail {

// How many command-line values an option takes: a boolean flag 0 or 1, a scalar exactly 1, a list
// 1 or more (argparse's nargs "?", None and "+").
enum class Arity { flag, one, list };

struct FieldSpec {
  std::string name;
  Arity arity = Arity::one;
  bool negatable = false;  // a boolean whose default is true: HF adds --no_<name>
  bool serialized = true;  // false for input-only aliases (evaluation_strategy)
  // The field's value as JSON (to_json).
  std::function<nlohmann::json(const TrainingArguments&)> get;
  // Sets the field from a JSON value; `where` prefixes error messages ("key 'seed'").
  std::function<void(TrainingArguments&, const nlohmann::json&, const std::string& where)> set_json;
  // Sets the field from command-line values (none for a bare flag); `where` is "argument --seed".
  std::function<void(TrainingArguments&, const std::vector<std::string>&, const std::string& where)> set_text;
  // --no_<name>: sets a negatable boolean to false.
  std::function<void(TrainingArguments&)> clear;
};

// Every option, in HF's declaration order.
const std::vector<FieldSpec>& fields();
// The option named `name` (underscores), or null.
const FieldSpec* find_field(std::string_view name);

// HF's string_to_bool: yes/true/t/y/1 and no/false/f/n/0, any case; else InvalidArgument naming
// `where` and the value.
bool parse_bool(const std::string& text, const std::string& where);

}  // namespace kiln::trainer::detail
