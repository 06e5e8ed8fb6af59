// Metrics with scikit-learn's definitions (include/kiln/metrics.h). Inputs are read element by
// element as double: metric inputs are small next to a forward pass, and one path for every dtype
// keeps the numbers identical whatever the model produced.
#include "kiln/metrics.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <functional>
#include <map>
#include <utility>

#include "kiln/error.h"

namespace kiln::trainer {
namespace {

// Neumaier's compensated sum: the result is within a few ulps of the exact sum, so it agrees
// with numpy's pairwise summation to ~1e-15 relative, well inside the tests' 1e-12.
class Sum {
 public:
  void add(double x) {
    const double t = s_ + x;
    c_ += std::fabs(s_) >= std::fabs(x) ? (s_ - t) + x : (x - t) + s_;
    s_ = t;
  }
  double value() const { return s_ + c_; }

 private:
  double s_ = 0, c_ = 0;
};

void check_not_empty(const Tensor& t, const char* what, const char* metric) {
  if (!t.defined() || t.numel() == 0)
    throw InvalidArgument(fmt::format("{}: {} is empty ({})", metric, what, t.defined() ? t.describe() : "undefined"));
}

std::vector<double> as_doubles(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<double> out(static_cast<size_t>(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) out[static_cast<size_t>(i)] = c.item_as_double(i);
  return out;
}

// Class ids from an integer tensor, or a float tensor whose values are integral.
std::vector<int64_t> class_ids(const Tensor& t, const char* what, const char* metric) {
  if (!is_floating(t.dtype())) return t.to_int64_vector();
  const std::vector<double> v = as_doubles(t);
  std::vector<int64_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]) || v[i] != std::trunc(v[i]) || std::fabs(v[i]) > 9.0e15)
      throw InvalidArgument(
          fmt::format("{}: {} {} holds {} at index {}, not a class id", metric, what, t.describe(), v[i], i));
    out[i] = static_cast<int64_t>(v[i]);
  }
  return out;
}

// Labels [N] as class ids.
std::vector<int64_t> labels_of(const Tensor& labels, const char* metric) {
  check_not_empty(labels, "labels", metric);
  if (labels.rank() != 1)
    throw ShapeError(fmt::format("{}: labels must be class ids [N], got {}", metric, labels.describe()));
  return class_ids(labels, "labels", metric);
}

// numpy.argmax over each row: the first maximum, and NaN counts as the maximum (numpy's rule).
std::vector<int64_t> argmax_rows(const Tensor& logits) {
  const int64_t n = logits.dim(0), c = logits.dim(1);
  const std::vector<double> v = as_doubles(logits);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double* row = v.data() + i * c;
    int64_t best = 0;
    for (int64_t j = 1; j < c && !std::isnan(row[best]); ++j)
      if (std::isnan(row[j]) || row[j] > row[best]) best = j;
    out[static_cast<size_t>(i)] = best;
  }
  return out;
}

// Predicted class ids from logits [N, C] or ids [N], checked against labels [N].
std::pair<std::vector<int64_t>, std::vector<int64_t>> predictions_and_labels(const Tensor& predictions,
                                                                             const Tensor& labels, const char* metric) {
  check_not_empty(predictions, "predictions", metric);
  std::vector<int64_t> y_true = labels_of(labels, metric);
  if (predictions.rank() != 1 && predictions.rank() != 2)
    throw ShapeError(
        fmt::format("{}: predictions must be logits [N, C] or class ids [N], got {}", metric, predictions.describe()));
  if (predictions.dim(0) != labels.dim(0))
    throw ShapeError(fmt::format("{}: predictions {} and labels {} have different numbers of samples", metric,
                                 predictions.describe(), labels.describe()));
  std::vector<int64_t> y_pred =
      predictions.rank() == 2 ? argmax_rows(predictions) : class_ids(predictions, "predictions", metric);
  return {std::move(y_pred), std::move(y_true)};
}

// Regression inputs as [N, outputs] row-major doubles; [N] is [N, 1], as sklearn reshapes it.
struct Regression {
  std::vector<double> pred, target;
  int64_t n = 0, outputs = 1;
};

Regression regression_inputs(const Tensor& predictions, const Tensor& targets, const char* metric) {
  check_not_empty(predictions, "predictions", metric);
  check_not_empty(targets, "targets", metric);
  auto outputs_of = [](const Tensor& t) { return t.rank() == 2 ? t.dim(1) : int64_t{1}; };
  if (predictions.rank() > 2 || targets.rank() > 2 || predictions.rank() == 0 || targets.rank() == 0 ||
      predictions.dim(0) != targets.dim(0) || outputs_of(predictions) != outputs_of(targets))
    throw ShapeError(fmt::format("{}: predictions {} and targets {} must both be [N] or [N, outputs] of the same size",
                                 metric, predictions.describe(), targets.describe()));
  return {as_doubles(predictions), as_doubles(targets), targets.dim(0), outputs_of(targets)};
}

// The uniform average over outputs of per_output(column of predictions, column of targets).
double average_over_outputs(const Regression& r, const std::function<double(int64_t column)>& per_output) {
  Sum total;
  for (int64_t o = 0; o < r.outputs; ++o) total.add(per_output(o));
  return total.value() / static_cast<double>(r.outputs);
}

double ratio_or_zero(double num, double den) { return den == 0 ? 0.0 : num / den; }
// sklearn 1.2: F = (1 + beta²) P R / (beta² P + R), and 0 when the denominator is 0.
double f1_of(double p, double r) { return p + r == 0 ? 0.0 : 2 * p * r / (p + r); }

}  // namespace

double accuracy(const Tensor& predictions_or_logits, const Tensor& labels) {
  const auto [y_pred, y_true] = predictions_and_labels(predictions_or_logits, labels, "accuracy");
  int64_t hits = 0;
  for (size_t i = 0; i < y_true.size(); ++i) hits += y_pred[i] == y_true[i];
  return static_cast<double>(hits) / static_cast<double>(y_true.size());
}

double top_k_accuracy(const Tensor& logits, const Tensor& labels, int64_t k) {
  constexpr const char* metric = "top_k_accuracy";
  if (k < 1) throw InvalidArgument(fmt::format("{}: k must be >= 1, got {}", metric, k));
  check_not_empty(logits, "scores", metric);
  const std::vector<int64_t> y_true = labels_of(labels, metric);
  if ((logits.rank() != 1 && logits.rank() != 2) || logits.dim(0) != labels.dim(0))
    throw ShapeError(
        fmt::format("{}: scores {} must be [N, C] or [N] for labels {}", metric, logits.describe(), labels.describe()));
  const std::vector<double> s = as_doubles(logits);
  const int64_t n = logits.dim(0);
  const int64_t c = logits.rank() == 2 ? logits.dim(1) : 2;
  for (size_t i = 0; i < y_true.size(); ++i)
    if (y_true[i] < 0 || y_true[i] >= c)
      throw InvalidArgument(
          fmt::format("{}: label {} at index {} is not a class of scores {}", metric, y_true[i], i, logits.describe()));
  int64_t hits = 0;
  if (logits.rank() == 1) {
    // sklearn's binary rule: scores are those of class 1, thresholded like probabilities when
    // they look like probabilities, like decision values otherwise.
    if (k >= 2) return 1.0;
    bool probabilities = true;
    for (double v : s) probabilities = probabilities && v >= 0 && v <= 1;
    const double threshold = probabilities ? 0.5 : 0.0;
    for (int64_t i = 0; i < n; ++i)
      hits += int64_t{s[static_cast<size_t>(i)] > threshold} == y_true[static_cast<size_t>(i)];
    return static_cast<double>(hits) / static_cast<double>(n);
  }
  for (int64_t i = 0; i < n; ++i) {
    const double* row = s.data() + i * c;
    const int64_t t = y_true[static_cast<size_t>(i)];
    int64_t ranked_above = 0;  // classes that sklearn's reversed stable argsort puts before t
    for (int64_t j = 0; j < c; ++j) ranked_above += row[j] > row[t] || (row[j] == row[t] && j > t);
    hits += ranked_above < k;
  }
  return static_cast<double>(hits) / static_cast<double>(n);
}

PrecisionRecallF1 precision_recall_f1(const Tensor& predictions_or_logits, const Tensor& labels,
                                      const std::string& average) {
  constexpr const char* metric = "precision_recall_f1";
  if (average != "micro" && average != "macro" && average != "weighted")
    throw InvalidArgument(
        fmt::format("{}: average '{}' is not one of \"micro\", \"macro\", \"weighted\"", metric, average));
  const auto [y_pred, y_true] = predictions_and_labels(predictions_or_logits, labels, metric);
  struct Counts {
    int64_t tp = 0, predicted = 0, support = 0;
  };
  std::map<int64_t, Counts> classes;  // sorted: the union of labels and predictions, as sklearn's
  for (size_t i = 0; i < y_true.size(); ++i) {
    ++classes[y_true[i]].support;
    ++classes[y_pred[i]].predicted;
    if (y_pred[i] == y_true[i]) ++classes[y_true[i]].tp;
  }
  if (average == "micro") {
    int64_t tp = 0, predicted = 0, support = 0;
    for (const auto& [id, k] : classes) tp += k.tp, predicted += k.predicted, support += k.support;
    const double p = ratio_or_zero(double(tp), double(predicted)), r = ratio_or_zero(double(tp), double(support));
    return {p, r, f1_of(p, r)};
  }
  Sum p, r, f, weights;
  for (const auto& [id, k] : classes) {
    const double cp = ratio_or_zero(double(k.tp), double(k.predicted));
    const double cr = ratio_or_zero(double(k.tp), double(k.support));
    const double w = average == "macro" ? 1.0 : double(k.support);
    p.add(w * cp), r.add(w * cr), f.add(w * f1_of(cp, cr)), weights.add(w);
  }
  const double total = weights.value();
  return {ratio_or_zero(p.value(), total), ratio_or_zero(r.value(), total), ratio_or_zero(f.value(), total)};
}

double mean_squared_error(const Tensor& predictions, const Tensor& targets) {
  const Regression r = regression_inputs(predictions, targets, "mean_squared_error");
  return average_over_outputs(r, [&](int64_t o) {
    Sum s;
    for (int64_t i = 0; i < r.n; ++i) {
      const size_t at = static_cast<size_t>(i * r.outputs + o);
      s.add((r.target[at] - r.pred[at]) * (r.target[at] - r.pred[at]));
    }
    return s.value() / static_cast<double>(r.n);
  });
}

double mean_absolute_error(const Tensor& predictions, const Tensor& targets) {
  const Regression r = regression_inputs(predictions, targets, "mean_absolute_error");
  return average_over_outputs(r, [&](int64_t o) {
    Sum s;
    for (int64_t i = 0; i < r.n; ++i) {
      const size_t at = static_cast<size_t>(i * r.outputs + o);
      s.add(std::fabs(r.target[at] - r.pred[at]));
    }
    return s.value() / static_cast<double>(r.n);
  });
}

double r2_score(const Tensor& predictions, const Tensor& targets) {
  const Regression r = regression_inputs(predictions, targets, "r2_score");
  if (r.n < 2) return std::nan("");
  return average_over_outputs(r, [&](int64_t o) {
    Sum mean_sum;
    for (int64_t i = 0; i < r.n; ++i) mean_sum.add(r.target[static_cast<size_t>(i * r.outputs + o)]);
    const double mean = mean_sum.value() / static_cast<double>(r.n);
    Sum residual, spread;
    for (int64_t i = 0; i < r.n; ++i) {
      const size_t at = static_cast<size_t>(i * r.outputs + o);
      residual.add((r.target[at] - r.pred[at]) * (r.target[at] - r.pred[at]));
      spread.add((r.target[at] - mean) * (r.target[at] - mean));
    }
    // force_finite: constant targets make R² 0/0 or x/0; sklearn reports 1 or 0 instead.
    if (spread.value() == 0) return residual.value() == 0 ? 1.0 : 0.0;
    return 1.0 - residual.value() / spread.value();
  });
}

double perplexity(double mean_cross_entropy_loss) { return std::exp(mean_cross_entropy_loss); }

namespace {

using MetricFn = std::function<double(const EvalPrediction&)>;

// The fixed names (a registry; "top<k>_accuracy" is parsed in metric_for since k is open-ended).
const std::map<std::string, MetricFn>& registry() {
  static const std::map<std::string, MetricFn> r = [] {
    std::map<std::string, MetricFn> m;
    m["accuracy"] = [](const EvalPrediction& e) { return accuracy(e.predictions, e.label_ids); };
    for (const std::string average : {"micro", "macro", "weighted"}) {
      m["precision_" + average] = [average](const EvalPrediction& e) {
        return precision_recall_f1(e.predictions, e.label_ids, average).precision;
      };
      m["recall_" + average] = [average](const EvalPrediction& e) {
        return precision_recall_f1(e.predictions, e.label_ids, average).recall;
      };
      m["f1_" + average] = [average](const EvalPrediction& e) {
        return precision_recall_f1(e.predictions, e.label_ids, average).f1;
      };
    }
    m["mse"] = [](const EvalPrediction& e) { return mean_squared_error(e.predictions, e.label_ids); };
    m["mae"] = [](const EvalPrediction& e) { return mean_absolute_error(e.predictions, e.label_ids); };
    m["r2"] = [](const EvalPrediction& e) { return r2_score(e.predictions, e.label_ids); };
    return m;
  }();
  return r;
}

// k of "top<k>_accuracy", or 0 when the name is not of that form.
int64_t top_k_of(const std::string& name) {
  const std::string prefix = "top", suffix = "_accuracy";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return 0;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 9 || digits[0] == '0') return 0;
  for (char ch : digits)
    if (ch < '0' || ch > '9') return 0;
  return std::stoll(digits);
}

MetricFn metric_for(const std::string& name) {
  if (auto it = registry().find(name); it != registry().end()) return it->second;
  if (const int64_t k = top_k_of(name); k > 0) {
    return [k, name](const EvalPrediction& e) {
      if (e.predictions.defined() && e.predictions.rank() != 2)
        throw ShapeError(
            fmt::format("metric '{}' needs logits [N, C] as predictions, got {}", name, e.predictions.describe()));
      return top_k_accuracy(e.predictions, e.label_ids, k);
    };
  }
  throw InvalidArgument(fmt::format("unknown metric '{}'; valid metrics: {}", name, fmt::join(metric_names(), ", ")));
}

}  // namespace

std::vector<std::string> metric_names() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.push_back(entry.first);
  names.push_back("top<k>_accuracy (k >= 1, e.g. top5_accuracy)");
  return names;
}

ComputeMetrics classification_metrics(std::vector<std::string> names) {
  if (names.empty()) throw InvalidArgument("classification_metrics: no metric names given");
  std::vector<std::pair<std::string, MetricFn>> metrics;
  for (auto& name : names) {
    MetricFn fn = metric_for(name);  // throws here, when the Trainer is set up, not at evaluation
    metrics.emplace_back(std::move(name), std::move(fn));
  }
  return [metrics = std::move(metrics)](const EvalPrediction& e) {
    Metrics out;
    for (const auto& [name, fn] : metrics) out[name] = fn(e);
    return out;
  };
}

}  // namespace kiln::trainer
