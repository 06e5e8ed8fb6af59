#include "training/losses.h"

#include <fmt/format.h>

#include <functional>
#include <map>

#include "kiln/error.h"

namespace kiln::training {

namespace {

struct LossContext {
  Model& model;
  GraphEditor& edit;
  std::string output;  // the model output the loss reads
  ValueInfo info;      // its declared type and shape (a copy: the graph grows)
  std::string name;    // "CrossEntropyLoss", for messages
  float label_smoothing = 0.0f;

  // Declares the labels input; its name must be free.
  std::string labels(DType dtype, std::vector<Dim> dims) {
    if (edit.has_value(kLabelsInput))
      throw InvalidArgument(
          fmt::format("{}: the model already has a value named '{}', the name of the labels input "
                      "the loss adds",
                      name, kLabelsInput));
    edit.fresh(kLabelsInput);
    ValueInfo v;
    v.name = kLabelsInput;
    v.dtype = dtype;
    v.has_type = true;
    v.has_shape = info.has_shape;
    v.dims = std::move(dims);
    model.graph.inputs.push_back(std::move(v));
    return kLabelsInput;
  }

  void require_float() const {
    if (!info.has_type || !is_floating(info.dtype))
      throw InvalidArgument(
          fmt::format("{} needs a floating-point model output, but '{}' is {}", name, output, info.describe()));
  }

  // A constant as a Constant node: an initializer would count as a trainable parameter.
  std::string constant(const std::string& base, Tensor value) {
    return edit.op("Constant", {}, {{"value", Attribute::of_tensor(std::move(value))}}, base);
  }

  std::string mean(const std::string& x) {
    return edit.op("ReduceMean", {x}, {{"keepdims", Attribute::of_int(0)}}, "loss");
  }
};

using LossBlock = std::function<std::string(LossContext&)>;

// torch.nn.CrossEntropyLoss(label_smoothing=e): (1 - e) * NLL + e * S, where S is the mean over
// the rows whose label is not ignored of -sum_c log p_c / C (HF's LabelSmoother computes the same).
std::string smoothed_cross_entropy(LossContext& c, const std::string& labels) {
  if (!(c.label_smoothing > 0.0f && c.label_smoothing <= 1.0f))
    throw InvalidArgument(fmt::format("label smoothing must be in (0, 1], got {}", c.label_smoothing));
  auto& e = c.edit;
  const DType dt = c.info.dtype;
  auto scalar = [&](const std::string& base, double v) {
    return c.constant(base,
                      dt == DType::Float64 ? Tensor::scalar<double>(v) : Tensor::scalar<float>(static_cast<float>(v)));
  };
  const std::string logp = e.op("LogSoftmax", {c.output}, {{"axis", Attribute::of_int(1)}}, "loss_logp");
  const std::string nll =
      e.op("NegativeLogLikelihoodLoss", {logp, labels},
           {{"reduction", Attribute::of_string("mean")}, {"ignore_index", Attribute::of_int(-100)}}, "loss_nll");
  const std::string class_axis = c.constant("loss_class_axis", Tensor::from_vector<int64_t>({1}, {1}));
  const std::string row_sum =
      e.op("ReduceSum", {logp, class_axis}, {{"keepdims", Attribute::of_int(0)}}, "loss_row_sum");
  const std::string ignored =
      e.op("Equal", {labels, c.constant("loss_ignore", Tensor::scalar<int64_t>(-100))}, {}, "loss_ignored");
  const std::string keep = e.op("Cast", {e.op("Not", {ignored}, {}, "loss_keep")},
                                {{"to", Attribute::of_int(dtype_to_onnx(dt))}}, "loss_keep_f");
  const std::string total = e.op("ReduceSum", {e.op("Mul", {row_sum, keep}, {}, "loss_kept")},
                                 {{"keepdims", Attribute::of_int(0)}}, "loss_total");
  const std::string classes = e.op(
      "Cast",
      {e.op("Gather", {e.op("Shape", {c.output}, {}, "loss_shape"), c.constant("loss_one", Tensor::scalar<int64_t>(1))},
            {{"axis", Attribute::of_int(0)}}, "loss_c")},
      {{"to", Attribute::of_int(dtype_to_onnx(dt))}}, "loss_classes");
  const std::string active = e.op("ReduceSum", {keep}, {{"keepdims", Attribute::of_int(0)}}, "loss_active");
  const std::string smooth =
      e.op("Neg", {e.op("Div", {total, e.op("Mul", {active, classes}, {}, "loss_count")}, {}, "loss_smooth_neg")}, {},
           "loss_smooth");
  return e.op("Add",
              {e.op("Mul", {scalar("loss_one_minus_e", 1.0 - c.label_smoothing), nll}, {}, "loss_nll_part"),
               e.op("Mul", {scalar("loss_e", c.label_smoothing), smooth}, {}, "loss_smooth_part")},
              {}, "loss");
}

// torch.nn.CrossEntropyLoss(): scores [N, C, d1...] and integer class labels [N, d1...].
std::string cross_entropy(LossContext& c) {
  c.require_float();
  if (c.info.has_shape && c.info.dims.size() < 2)
    throw InvalidArgument(fmt::format("CrossEntropyLoss needs class scores of shape [N, C, ...], but '{}' is {}",
                                      c.output, c.info.describe()));
  std::vector<Dim> dims;
  if (c.info.has_shape) {
    dims.push_back(c.info.dims[0]);
    dims.insert(dims.end(), c.info.dims.begin() + 2, c.info.dims.end());
  }
  const std::string labels = c.labels(DType::Int64, dims);
  if (c.label_smoothing == 0.0f)
    return c.edit.op("SoftmaxCrossEntropyLoss", {c.output, labels},
                     {{"reduction", Attribute::of_string("mean")}, {"ignore_index", Attribute::of_int(-100)}}, "loss");
  return smoothed_cross_entropy(c, labels);
}

// torch.nn.MSELoss(): mean((x - y)^2).
std::string mse(LossContext& c) {
  c.require_float();
  const std::string labels = c.labels(c.info.dtype, c.info.dims);
  const std::string d = c.edit.op("Sub", {c.output, labels}, {}, "loss_diff");
  return c.mean(c.edit.op("Mul", {d, d}, {}, "loss_sq"));
}

// torch.nn.L1Loss(): mean(|x - y|).
std::string l1(LossContext& c) {
  c.require_float();
  const std::string labels = c.labels(c.info.dtype, c.info.dims);
  return c.mean(c.edit.op("Abs", {c.edit.op("Sub", {c.output, labels}, {}, "loss_diff")}, {}, "loss_abs"));
}

// torch.nn.BCEWithLogitsLoss(): mean(max(x, 0) - x*y + log(1 + exp(-|x|))), the stable form.
std::string bce_with_logits(LossContext& c) {
  c.require_float();
  const std::string y = c.labels(c.info.dtype, c.info.dims);
  auto& e = c.edit;
  const std::string& x = c.output;
  const std::string pos = e.op("Relu", {x}, {}, "loss_relu");
  const std::string xy = e.op("Mul", {x, y}, {}, "loss_xy");
  const std::string soft =
      e.op("Softplus", {e.op("Neg", {e.op("Abs", {x}, {}, "loss_abs")}, {}, "loss_neg")}, {}, "loss_softplus");
  return c.mean(e.op("Add", {e.op("Sub", {pos, xy}, {}, "loss_sub"), soft}, {}, "loss_terms"));
}

const std::map<LossType, LossBlock>& blocks() {
  static const std::map<LossType, LossBlock> table = {
      {LossType::CrossEntropyLoss, cross_entropy},
      {LossType::MSELoss, mse},
      {LossType::L1Loss, l1},
      {LossType::BCEWithLogitsLoss, bce_with_logits},
  };
  return table;
}

}  // namespace

std::string add_loss(LossType loss, Model& model, GraphEditor& edit, const std::vector<std::string>& outputs,
                     float label_smoothing) {
  if (label_smoothing != 0.0f && loss != LossType::CrossEntropyLoss)
    throw InvalidArgument(fmt::format("label smoothing applies to CrossEntropyLoss, not {}", to_string(loss)));
  auto it = blocks().find(loss);
  if (it == blocks().end()) throw InvalidArgument(fmt::format("no loss block for {}", to_string(loss)));
  if (outputs.size() != 1)
    throw InvalidArgument(
        fmt::format("{} takes one model output, but {} were named as its inputs", to_string(loss), outputs.size()));
  const ValueInfo* info = find_declared(model.graph, outputs[0]);
  if (info == nullptr)
    throw InvalidArgument(fmt::format("{}: '{}' is not a declared output of the model", to_string(loss), outputs[0]));
  LossContext ctx{model, edit, outputs[0], *info, to_string(loss), label_smoothing};
  return it->second(ctx);
}

}  // namespace kiln::training
