// Small parsers shared by the kiln commands.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln::cli {

// "a,b,c" -> {"a", "b", "c"}; empty items are dropped.
std::vector<std::string> split_list(const std::vector<std::string>& items);
// {"batch=8", "seq=128"} -> {{"batch", 8}, {"seq", 128}}; InvalidArgument on a malformed item.
std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& items);
// Zero-filled feeds for every graph input: fixed dims as declared, symbolic dims from `dims`
// (default 1); an input with unknown rank is an InvalidArgument naming it.
std::map<std::string, Tensor> example_feeds(const Model& m, const std::map<std::string, int64_t>& dims);

}  // namespace kiln::cli
