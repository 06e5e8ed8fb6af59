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
  std::string output;      // the model output the loss reads
  ValueInfo info;          // its declared type and shape (a copy: the graph grows)
  std::string name;        // "CrossEntropyLoss", for messages

  // Declares the labels input; its name must be free.
  std::string labels(DType dtype, std::vector<Dim> dims) {
    if (edit.has_value(kLabelsInput))
      throw InvalidArgument(fmt::format("{}: the model already has a value named '{}', the name of the labels input "
                                        "the loss adds", name, kLabelsInput));
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
      throw InvalidArgument(fmt::format("{} needs a floating-point model output, but '{}' is {}", name, output,
                                        info.describe()));
  }

  std::string mean(const std::string& x) {
    return edit.op("ReduceMean", {x}, {{"keepdims", Attribute::of_int(0)}}, "loss");
  }
};

using LossBlock = std::function<std::string(LossContext&)>;

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
  return c.edit.op("SoftmaxCrossEntropyLoss", {c.output, labels},
                   {{"reduction", Attribute::of_string("mean")}, {"ignore_index", Attribute::of_int(-100)}}, "loss");
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
  const std::string soft = e.op("Softplus", {e.op("Neg", {e.op("Abs", {x}, {}, "loss_abs")}, {}, "loss_neg")}, {},
                                "loss_softplus");
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

std::string add_loss(LossType loss, Model& model, GraphEditor& edit, const std::vector<std::string>& outputs) {
  auto it = blocks().find(loss);
  if (it == blocks().end()) throw InvalidArgument(fmt::format("no loss block for {}", to_string(loss)));
  if (outputs.size() != 1)
    throw InvalidArgument(fmt::format("{} takes one model output, but {} were named as its inputs", to_string(loss),
                                      outputs.size()));
  const ValueInfo* info = find_declared(model.graph, outputs[0]);
  if (info == nullptr)
    throw InvalidArgument(fmt::format("{}: '{}' is not a declared output of the model", to_string(loss), outputs[0]));
  LossContext ctx{model, edit, outputs[0], *info, to_string(loss)};
  return it->second(ctx);
}

}  // namespace kiln::training
