// TfIdfVectorizer (opset 9) over integer tokens: counts the pool's n-grams (min_gram_length to
// max_gram_length tokens, consecutive or with up to max_skip_count tokens skipped between them;
// 1-grams are counted once) in each row of X, at their ngram_indexes, then TF (counts), IDF
// (weight where present) or TFIDF (count * weight). The pool lists the n-grams of each length in
// turn, ngram_counts giving where each length starts. String pools need string tensors, which Kiln
// does not have.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class TfIdfVectorizerKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    if (node_.has_attr("pool_strings"))
      throw Unsupported("TfIdfVectorizer: pool_strings needs string tensors, which Kiln does not have");
    if (x.dtype != DType::Int64 && x.dtype != DType::Int32)
      throw TypeError(fmt::format("TfIdfVectorizer: X {} must be int32 or int64", x.describe()));
    if (x.shape.empty() || x.shape.size() > 2)
      throw ShapeError(fmt::format("TfIdfVectorizer: X {} must be [C] or [N, C]", x.describe()));
    read_pool();
    Shape y = x.shape;
    y.back() = width_;
    return {TensorMeta{DType::Float32, y, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const std::vector<int64_t> v = x.to_int64_vector();
    const int64_t cols = x.dim(-1), rows = cols ? x.numel() / cols : (x.rank() == 2 ? x.dim(0) : 1);
    float* py = ctx.output(0).data<float>();
    std::fill(py, py + ctx.output(0).numel(), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t* row = v.data() + r * cols;
      float* out = py + r * width_;
      for (int64_t n = min_gram_; n <= max_gram_; ++n) {
        const auto& grams = pool_[size_t(n)];
        if (grams.empty()) continue;
        const int64_t max_dist = n == 1 ? 1 : max_skip_ + 1;
        std::vector<int64_t> gram(static_cast<size_t>(n));
        for (int64_t d = 1; d <= max_dist; ++d)
          for (int64_t i = 0; i + (n - 1) * d < cols; ++i) {
            for (int64_t k = 0; k < n; ++k) gram[size_t(k)] = row[i + k * d];
            const auto it = grams.find(gram);
            if (it != grams.end()) out[it->second] += 1.0f;
          }
      }
      for (int64_t j = 0; j < width_; ++j) {
        const float w = weights_.empty() ? 1.0f : weights_[size_t(slot_of_[size_t(j)])];
        if (mode_ == "IDF") out[j] = out[j] > 0 ? w : 0.0f;
        else if (mode_ == "TFIDF") out[j] *= w;
      }
    }
  }

 private:
  void read_pool() {
    min_gram_ = node_.attr_int("min_gram_length");
    max_gram_ = node_.attr_int("max_gram_length");
    max_skip_ = node_.attr_int("max_skip_count");
    mode_ = node_.attr_string("mode");
    if (mode_ != "TF" && mode_ != "IDF" && mode_ != "TFIDF")
      throw InvalidModel(fmt::format("TfIdfVectorizer: mode '{}' must be TF, IDF or TFIDF", mode_));
    if (min_gram_ < 1 || max_gram_ < min_gram_ || max_skip_ < 0)
      throw InvalidModel(
          fmt::format("TfIdfVectorizer: min_gram_length {}, max_gram_length {} and max_skip_count {} "
                      "must satisfy 1 <= min <= max and skip >= 0",
                      min_gram_, max_gram_, max_skip_));
    const std::vector<int64_t> pool = node_.attr_ints("pool_int64s");
    const std::vector<int64_t> counts = node_.attr_ints("ngram_counts");
    const std::vector<int64_t> indexes = node_.attr_ints("ngram_indexes");
    weights_ = node_.attr_floats("weights", {});
    pool_.assign(counts.size() + 1, {});
    width_ = indexes.empty() ? 0 : *std::max_element(indexes.begin(), indexes.end()) + 1;
    slot_of_.assign(size_t(width_), 0);
    int64_t slot = 0;
    for (size_t len = 1; len <= counts.size(); ++len) {
      const int64_t begin = counts[len - 1], end = len < counts.size() ? counts[len] : int64_t(pool.size());
      if (begin < 0 || end < begin || end > int64_t(pool.size()) || (end - begin) % int64_t(len) != 0)
        throw InvalidModel(
            fmt::format("TfIdfVectorizer: ngram_counts [{}] do not cut pool_int64s ({} values) into "
                        "whole {}-grams",
                        fmt::join(counts, ", "), pool.size(), len));
      for (int64_t at = begin; at < end; at += int64_t(len), ++slot) {
        if (slot >= int64_t(indexes.size()) || indexes[size_t(slot)] < 0)
          throw InvalidModel(fmt::format("TfIdfVectorizer: ngram_indexes has no valid entry for n-gram {}", slot));
        pool_[len][std::vector<int64_t>(pool.begin() + at, pool.begin() + at + int64_t(len))] = indexes[size_t(slot)];
        slot_of_[size_t(indexes[size_t(slot)])] = slot;
      }
    }
    if (!weights_.empty() && int64_t(weights_.size()) != slot)
      throw InvalidModel(fmt::format("TfIdfVectorizer: {} weights for {} n-grams", weights_.size(), slot));
    pool_.resize(size_t(std::max<int64_t>(max_gram_ + 1, int64_t(pool_.size()))));
  }

  int64_t min_gram_ = 1, max_gram_ = 1, max_skip_ = 0, width_ = 0;
  std::string mode_;
  std::vector<std::map<std::vector<int64_t>, int64_t>> pool_;  // by length: n-gram -> output index
  std::vector<float> weights_;                                 // by n-gram, in pool order
  std::vector<int64_t> slot_of_;                               // output index -> n-gram
};

const KernelRegistrar tfidf_reg({"", "TfIdfVectorizer", 9, kMaxOpset, {DType::Int64, DType::Int32}},
                                [](const Node& n) { return std::make_unique<TfIdfVectorizerKernel>(n); });

}  // namespace
}  // namespace kiln
