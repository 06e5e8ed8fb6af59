// Small parsers shared by the kiln commands.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::cli {

// "a,b,c" -> {"a", "b", "c"}; empty items are dropped.
std::vector<std::string> split_list(const std::vector<std::string>& items);
// "464,3290,318" -> {464, 3290, 318}; InvalidArgument naming `flag` on an item that is not an integer.
std::vector<int64_t> parse_ids(const std::string& text, const std::string& flag);
// {"batch=8", "seq=128"} -> {{"batch", 8}, {"seq", 128}}; InvalidArgument on a malformed item.
std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& items);
// The dtype and shape of every graph input, for planning (nothing is allocated): fixed dims as
// declared, symbolic dims from `dims` (default 1). An input with unknown rank is an
// InvalidArgument naming it; a size beyond what a machine can hold is a ShapeError.
std::map<std::string, TensorMeta> example_feeds(const Model& m, const std::map<std::string, int64_t>& dims);

}  // namespace kiln::cli
