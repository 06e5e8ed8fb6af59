// The rules that tie kernels and gradients together: every forward op Kiln runs has a gradient rule
// or a "no gradient" marker at every opset its kernels cover; rules live in the autodiff file named
// like the kernel family file that registers their op; every ai.kiln op is documented.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "autodiff/registry.h"
#include "kiln/autodiff.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// The newest opset the coverage check walks to for kernels registered up to kMaxOpset.
constexpr int64_t kNewestOpset = 21;

// Opsets at which an op runs but has no gradient rule yet, with the reason; the builder reports
// them as Unsupported, naming the opsets that have a rule.
struct KnownGap {
  const char* op;
  int64_t since, end;
  const char* why;
};
const KnownGap kKnownGaps[] = {
    {"Softmax", 1, 12, "opsets 1-12 flatten to 2-D; the rule handles opset 13's single axis"},
    {"LogSoftmax", 1, 12, "opsets 1-12 flatten to 2-D; the rule handles opset 13's single axis"},
    {"Scan", 8, 8, "Scan-8's batch axis and sequence_lens: the forward runs; opset 9's Scan has the rule"},
};

bool known_gap(const KernelDef& d, int64_t opset) {
  return std::any_of(std::begin(kKnownGaps), std::end(kKnownGaps), [&](const KnownGap& g) {
    return d.domain.empty() && d.op_type == g.op && g.since <= opset && opset <= g.end;
  });
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(GradientCoverage, EveryForwardKernelHasARuleOrAMarkerAtEveryOpset) {
  std::set<std::string> missing;
  for (const KernelDef& d : KernelRegistry::global().all()) {
    if (d.domain == kKilnDomain || d.domain.rfind("test.", 0) == 0) continue;  // test-only kernels
    const int64_t last = std::min<int64_t>(d.end_version, kNewestOpset);
    for (int64_t opset = d.since_version; opset <= last; ++opset)
      if (gradient_kind(d.domain, d.op_type, opset) == GradientKind::None && !known_gap(d, opset))
        missing.insert(d.op_type + " at opset " + std::to_string(opset));
  }
  std::string list;
  for (const auto& op : missing) list += op + "; ";
  EXPECT_TRUE(missing.empty()) << "ops with neither a gradient rule nor a NoGradient marker: " << list;
}

TEST(GradientCoverage, KnownGapsAreStillGaps) {
  for (const KnownGap& g : kKnownGaps)
    for (int64_t opset = g.since; opset <= g.end; ++opset)
      EXPECT_EQ(gradient_kind("", g.op, opset), GradientKind::None)
          << g.op << " has a rule at opset " << opset << ": remove it from kKnownGaps";
}

TEST(GradientCoverage, RuleRangesOfAnOpDoNotOverlap) {
  for (const auto& [key, entries] : GradientRegistry::global().entries())
    for (size_t i = 0; i < entries.size(); ++i)
      for (size_t j = i + 1; j < entries.size(); ++j) {
        const GradientDef& a = entries[i].def;
        const GradientDef& b = entries[j].def;
        EXPECT_TRUE(a.end_version < b.since_version || b.end_version < a.since_version)
            << key.op_type << ": opsets " << a.range() << " (" << entries[i].file << ") and " << b.range() << " ("
            << entries[j].file << ") overlap";
      }
}

// A rule or marker registered from src/autodiff/X.cpp belongs to the kernel family file
// src/kernels/cpu/X.cpp, which must exist and register the op (name it in quotes).
TEST(GradientCoverage, RulesLiveInTheAutodiffFileNamedLikeTheirKernelFamily) {
  const fs::path kernels = fs::path(KILN_SOURCE_DIR) / "src" / "kernels" / "cpu";
  std::map<std::string, std::string> sources;  // family -> kernel file text
  for (const auto& [key, entries] : GradientRegistry::global().entries())
    for (const GradientEntry& e : entries) {
      const fs::path file(e.file);
      const std::string family = file.stem().string();
      const std::string what =
          key.op_type + " (" + file.parent_path().filename().string() + "/" + file.filename().string() + ")";
      EXPECT_EQ(file.parent_path().filename(), "autodiff") << what << " is registered outside src/autodiff";
      const fs::path kernel = kernels / (family + ".cpp");
      if (!fs::exists(kernel)) {
        ADD_FAILURE() << what << ": there is no kernel family file " << kernel.string()
                      << "; rules live in the autodiff file named like the kernel file that registers the op";
        continue;
      }
      if (!sources.count(family)) sources[family] = read_text(kernel);
      EXPECT_NE(sources[family].find("\"" + key.op_type + "\""), std::string::npos)
          << what << ": " << kernel.string() << " does not register " << key.op_type
          << "; move the rule to the autodiff file of the op's kernel family";
    }
}

// ai.kiln's gradient kernels live in <family>_grad.cpp beside their forward family, the ops Kiln's
// fusion passes write in <family>_fused.cpp; the optimizer steps (optimizer_<name>.cpp: kiln, lamb,
// adagrad, adafactor) are the only ai.kiln kernels elsewhere.
TEST(GradientCoverage, KilnGradientKernelsLiveInGradFiles) {
  const fs::path kernels = fs::path(KILN_SOURCE_DIR) / "src" / "kernels" / "cpu";
  for (const auto& entry : fs::directory_iterator(kernels)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".cpp" || name.ends_with("_grad.cpp") || name.ends_with("_fused.cpp") ||
        (name.starts_with("optimizer_") && name != "optimizer_onnx.cpp"))
      continue;
    EXPECT_EQ(read_text(entry.path()).find("{kKilnDomain,"), std::string::npos)
        << name << " registers an ai.kiln kernel; gradient kernels go in <family>_grad.cpp, fused ops in "
        << "<family>_fused.cpp";
  }
}

TEST(GradientCoverage, EveryKilnOpIsDocumented) {
  std::set<std::string> undocumented;
  for (const KernelDef& d : KernelRegistry::global().all()) {
    if (d.domain != kKilnDomain) continue;
    bool found = false;
    for (const OpDoc& doc : op_docs())
      found = found || (doc.domain == d.domain && doc.op_type == d.op_type && !doc.math.empty() &&
                        !doc.inputs.empty() && !doc.outputs.empty());
    if (!found) undocumented.insert(d.op_type);
  }
  std::string list;
  for (const auto& op : undocumented) list += op + " ";
  EXPECT_TRUE(undocumented.empty()) << "ai.kiln ops without an OpDocRegistrar (inputs, outputs, math): " << list;
}

}  // namespace
}  // namespace kiln
