// Every forward op Kiln runs must either have a gradient rule or be marked as having none.
#include <gtest/gtest.h>

#include <set>

#include "kiln/autodiff.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

TEST(GradientCoverage, EveryForwardKernelHasARuleOrAMarker) {
  std::set<std::string> missing;
  for (const KernelDef& d : KernelRegistry::global().all()) {
    if (d.domain == kKilnDomain || d.domain == "test.kiln") continue;
    if (gradient_kind(d.domain, d.op_type) == GradientKind::None) missing.insert(d.op_type);
  }
  std::string list;
  for (const auto& op : missing) list += op + " ";
  EXPECT_TRUE(missing.empty()) << "ops with neither a gradient rule nor a NoGradient marker: " << list;
}

TEST(GradientCoverage, EveryKilnOpIsDocumented) {
  std::set<std::string> undocumented;
  for (const KernelDef& d : KernelRegistry::global().all()) {
    if (d.domain != kKilnDomain) continue;
    bool found = false;
    for (const OpDoc& doc : op_docs())
      found = found || (doc.domain == d.domain && doc.op_type == d.op_type && !doc.math.empty() && !doc.inputs.empty() &&
                        !doc.outputs.empty());
    if (!found) undocumented.insert(d.op_type);
  }
  std::string list;
  for (const auto& op : undocumented) list += op + " ";
  EXPECT_TRUE(undocumented.empty()) << "ai.kiln ops without an OpDocRegistrar (inputs, outputs, math): " << list;
}

}  // namespace
}  // namespace kiln
