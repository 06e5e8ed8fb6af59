// StringNormalizer (opset 10): drops the stopwords from a [C] or [1, C] string tensor (matched
// exactly, or ignoring case when is_case_sensitive = 0), then changes the case of what is left
// (case_change_action LOWER / UPPER / NONE). When every string is dropped the result is one empty
// string, [1] or [1, 1], as ONNX specifies. Case is changed and compared for ASCII letters; other
// UTF-8 bytes pass unchanged, whatever `locale` says.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

std::string lowered(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string uppered(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

class StringNormalizerKernel final : public Kernel {
 public:
  explicit StringNormalizerKernel(const Node& n) : Kernel(n) {
    action_ = n.attr_string("case_change_action", "NONE");
    if (action_ != "NONE" && action_ != "LOWER" && action_ != "UPPER")
      throw InvalidModel(fmt::format("StringNormalizer: case_change_action '{}' is not NONE, LOWER or UPPER", action_));
    case_sensitive_ = n.attr_int("is_case_sensitive", 0) != 0;
    const auto it = n.attrs.find("stopwords");
    if (it != n.attrs.end())
      for (const std::string& w : it->second.strings) stopwords_.insert(case_sensitive_ ? w : lowered(w));
  }
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& s = ctx.shape(0);
    if (!(s.size() == 1 || (s.size() == 2 && s[0] == 1)))
      throw ShapeError(fmt::format("StringNormalizer: X is string{}; it must be [C] or [1, C]", to_string(s)));
    const Tensor& x = ctx.value(0);  // the output's length depends on the strings
    kept_.clear();
    const auto* in = x.data<std::string>();
    for (int64_t i = 0; i < x.numel(); ++i)
      if (!stopwords_.count(case_sensitive_ ? in[i] : lowered(in[i]))) kept_.push_back(changed(in[i]));
    if (kept_.empty()) kept_.emplace_back();
    const auto c = static_cast<int64_t>(kept_.size());
    return {TensorMeta{DType::String, s.size() == 1 ? Shape{c} : Shape{1, c}, false, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    std::copy(kept_.begin(), kept_.end(), ctx.output(0).data<std::string>());
    kept_.clear();
  }
  bool foldable() const override { return false; }

 private:
  std::string changed(const std::string& s) const {
    if (action_ == "LOWER") return lowered(s);
    if (action_ == "UPPER") return uppered(s);
    return s;
  }
  std::string action_;
  bool case_sensitive_ = false;
  std::set<std::string> stopwords_;
  std::vector<std::string> kept_;
};

const KernelRegistrar reg({"", "StringNormalizer", 10, kMaxOpset, {DType::String}},
                          [](const Node& n) { return std::make_unique<StringNormalizerKernel>(n); });

}  // namespace
}  // namespace kiln
