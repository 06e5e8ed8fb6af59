// Metrics for the Trainer's compute_metrics, with scikit-learn's definitions (what HF `evaluate`
// computes), so numbers reported by Kiln can be compared with those of a transformers script.
//
//   auto cm = kiln::trainer::classification_metrics({"accuracy", "f1_macro", "top5_accuracy"});
//   kiln::trainer::Trainer trainer(model, args, train, eval, cm);   // eval_accuracy, eval_f1_macro, ...
//
// Classification inputs: logits / scores [N, C] of any float dtype (the prediction is the arg max,
// the first index on ties as numpy.argmax), or class ids [N] (integer dtype, or float with integral
// values). Labels are class ids [N]. Regression inputs: [N] or [N, outputs] (a [N] tensor and a
// [N, 1] tensor are compatible, as in sklearn). Everything is computed in double with compensated
// sums, whatever the input dtype.
// Errors: ShapeError naming both shapes when they disagree, InvalidArgument for empty inputs,
// non-integral class ids, an unknown average or metric name, or k < 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/tensor.h"
#include "kiln/trainer.h"

namespace kiln::trainer {

// Fraction of samples whose predicted class equals the label (sklearn's accuracy_score).
double accuracy(const Tensor& predictions_or_logits, const Tensor& labels);

// sklearn's top_k_accuracy_score(labels, scores, k=k, labels=range(C)): the label is a hit when it
// is among the k best-scored classes. Ties follow sklearn (a stable ascending argsort, reversed):
// among equal scores the higher class index ranks first, so class j beats the label t when
// score[j] > score[t] or (score[j] == score[t] and j > t). k >= C: every sample is a hit.
// scores [N] (binary, the score of class 1): k == 1 predicts class 1 when score > 0.5 if all scores
// lie in [0, 1], else when score > 0; k >= 2 is always a hit. sklearn refuses [N, 2] scores with
// binary labels; Kiln applies the rule for [N, C] to them.
double top_k_accuracy(const Tensor& logits, const Tensor& labels, int64_t k);

struct PrecisionRecallF1 {
  double precision = 0;
  double recall = 0;
  double f1 = 0;
};

// sklearn's precision_recall_fscore_support(labels, predictions, average=average,
// zero_division=0): the classes are the sorted union of those in labels and predictions;
// average is "micro" (global counts), "macro" (unweighted mean over classes) or "weighted" (mean
// weighted by each class's support). A ratio with a zero denominator counts 0; so does F1 when
// precision + recall is 0.
PrecisionRecallF1 precision_recall_f1(const Tensor& predictions_or_logits, const Tensor& labels,
                                      const std::string& average);

// sklearn's mean_squared_error / mean_absolute_error(targets, predictions), the uniform average of
// the per-output values.
double mean_squared_error(const Tensor& predictions, const Tensor& targets);
double mean_absolute_error(const Tensor& predictions, const Tensor& targets);
// sklearn's r2_score(targets, predictions), uniform average over outputs, force_finite=True: an
// output with constant targets scores 1.0 when predicted exactly and 0.0 otherwise. Fewer than two
// samples: NaN, as sklearn (R² is not defined there).
double r2_score(const Tensor& predictions, const Tensor& targets);

// exp(loss), as HF's run_clm example (inf when it overflows).
double perplexity(double mean_cross_entropy_loss);

// The metric names classification_metrics accepts: "accuracy"; "precision_", "recall_" and "f1_"
// followed by "micro", "macro" or "weighted"; "top<k>_accuracy" for any k >= 1 (e.g.
// "top5_accuracy"); and, for regression heads, "mse", "mae" and "r2".
std::vector<std::string> metric_names();

// A compute_metrics for the Trainer returning {name: value} for each name (the Trainer adds the
// "eval_" prefix). Names are checked here: an unknown one is an InvalidArgument listing the valid
// ones. "top<k>_accuracy" needs logits in EvalPrediction.predictions.
ComputeMetrics classification_metrics(std::vector<std::string> names);

}  // namespace kiln::trainer
