// `kiln ops [--json]`: the kernel registry — every op Kiln runs, with its domain, opset range and
// dtypes. docs/ops.md is generated from this (scripts/gen_ops_doc.py).
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "commands.h"
#include "kiln/kernel.h"

namespace kiln::cli {
namespace {

struct OpEntry {
  std::string domain, op;
  struct Range {
    int64_t since, until;
    std::set<std::string> dtypes;  // empty: any
  };
  std::vector<Range> ranges;
};

std::map<std::pair<std::string, std::string>, OpEntry> collect() {
  std::map<std::pair<std::string, std::string>, OpEntry> ops;
  for (const KernelDef& d : KernelRegistry::global().all()) {
    OpEntry& e = ops[{d.domain, d.op_type}];
    e.domain = d.domain.empty() ? "ai.onnx" : d.domain;
    e.op = d.op_type;
    std::set<std::string> types;
    for (DType t : d.dtypes) types.insert(dtype_name(t));
    e.ranges.push_back({d.since_version, d.end_version, types});
  }
  return ops;
}

void list_ops(bool as_json) {
  const auto ops = collect();
  if (as_json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [key, e] : ops) {
      nlohmann::json ranges = nlohmann::json::array();
      for (const auto& r : e.ranges)
        ranges.push_back({{"since", r.since},
                          {"until", r.until == kMaxOpset ? nlohmann::json(nullptr) : nlohmann::json(r.until)},
                          {"dtypes", r.dtypes}});
      nlohmann::json entry = {{"domain", e.domain}, {"op", e.op}, {"kernels", ranges}};
      for (const OpDoc& d : op_docs())
        if ((d.domain.empty() ? "ai.onnx" : d.domain) == e.domain && d.op_type == e.op)
          entry["doc"] = {{"summary", d.summary}, {"inputs", d.inputs}, {"outputs", d.outputs}, {"math", d.math}};
      out.push_back(entry);
    }
    std::cout << out.dump(1) << "\n";
    return;
  }
  for (const auto& [key, e] : ops) {
    std::vector<std::string> parts;
    for (const auto& r : e.ranges)
      parts.push_back(fmt::format("{}..{} {}", r.since,
                                  r.until == kMaxOpset ? std::string("") : std::to_string(r.until),
                                  r.dtypes.empty() ? std::string("any") : fmt::format("{}", fmt::join(r.dtypes, "/"))));
    fmt::print("{:<28} {:<26} {}\n", e.op, e.domain, fmt::join(parts, "; "));
  }
  fmt::print("{} ops\n", ops.size());
  fmt::print("bfloat16 products (mixed precision): {}\n", bf16_compute_path());
}

Action setup_ops(CLI::App& app) {
  auto as_json = std::make_shared<bool>(false);
  app.add_flag("--json", *as_json, "Print JSON");
  return [as_json] { list_ops(*as_json); };
}

const CommandRegistrar reg({"ops", "List the ops Kiln runs (domain, opset range, dtypes)", setup_ops});

}  // namespace
}  // namespace kiln::cli
