// `kiln artifacts MODEL.onnx --loss L --optimizer O --out DIR [...]`: writes the training, eval and
// optimizer models and the checkpoint, as ONNX Runtime's generate_artifacts does.
#include <fmt/format.h>

#include <memory>

#include "commands.h"
#include "kiln/artifacts.h"
#include "kiln/error.h"
#include "kiln/onnx_io.h"
#include "options.h"

namespace kiln::cli {
namespace {

struct ArtifactsOptions {
  std::string model, loss, optimizer, out, prefix, mixed_precision = "no";
  std::vector<std::string> requires_grad, frozen, loss_inputs, additional_outputs, recompute_boundaries;
  bool nominal = false;
  training::ArtifactOptions o;
};

void run_artifacts(ArtifactsOptions& a) {
  training::ArtifactOptions& o = a.o;
  o.loss = training::loss_type_from_string(a.loss);
  if (a.optimizer != "none") o.optimizer = training::optim_type_from_string(a.optimizer);
  o.requires_grad = split_list(a.requires_grad);
  o.frozen_params = split_list(a.frozen);
  o.loss_input_names = split_list(a.loss_inputs);
  o.additional_output_names = split_list(a.additional_outputs);
  o.recompute.boundaries = split_list(a.recompute_boundaries);
  if (!o.recompute.boundaries.empty() && !o.recompute.enabled)
    throw InvalidArgument("--recompute-boundaries needs --recompute");
  o.mixed_precision = training::mixed_precision_from_string(a.mixed_precision);
  o.nominal_checkpoint = a.nominal;
  o.prefix = a.prefix;
  const std::vector<std::string> written = training::generate_artifacts(load_model(a.model), o, a.out);
  for (const auto& path : written) fmt::print("wrote {}\n", path);
}

Action setup(CLI::App& app) {
  auto a = std::make_shared<ArtifactsOptions>();
  app.add_option("model", a->model, "The forward ONNX model")->required();
  app.add_option("--loss", a->loss,
                 "CrossEntropyLoss, MSELoss, BCEWithLogitsLoss, L1Loss, or none (the model outputs the loss)")
      ->required();
  app.add_option("--optimizer", a->optimizer,
                 "AdamW, SGD, Lamb, Adagrad, Adafactor (transformers' defaults), or none (no optimizer model)")
      ->required();
  app.add_option("--out", a->out, "The artifact directory (created if needed)")->required();
  app.add_option("--requires-grad", a->requires_grad,
                 "Trainable parameters, comma separated (default: every floating-point initializer "
                 "through which a gradient reaches the loss)");
  app.add_option("--frozen-params", a->frozen, "Parameters kept fixed, comma separated");
  app.add_option("--loss-input-names", a->loss_inputs, "Model outputs the loss reads (default: the first)");
  app.add_option("--additional-output-names", a->additional_outputs,
                 "Model outputs the training and eval models also return");
  app.add_flag("--nominal-checkpoint", a->nominal, "Write parameter names, dtypes and shapes only");
  app.add_flag("--recompute", a->o.recompute.enabled,
               "Gradient checkpointing: keep the activations at boundaries found from the graph and recompute "
               "the rest in the backward pass");
  app.add_option("--recompute-boundaries", a->recompute_boundaries,
                 "With --recompute: the forward values to keep instead, comma separated");
  app.add_option("--mixed-precision", a->mixed_precision,
                 "bf16: matrix products (MatMul, Gemm, Conv, attention) and their gradients in bfloat16 with float32 "
                 "accumulation, the rest and the parameters in float32 (torch.autocast's split); no: float32")
      ->capture_default_str();
  app.add_option("--prefix", a->prefix, "Prefix of the file names");
  app.add_option("--lr", a->o.learning_rate, "Initial learning rate kept in the optimizer model")
      ->capture_default_str();
  app.add_option("--weight-decay", a->o.adamw.weight_decay,
                 "Weight decay (AdamW default 0.01; for SGD use --sgd-weight-decay)")
      ->capture_default_str();
  app.add_option("--beta1", a->o.adamw.beta1, "AdamW beta1")->capture_default_str();
  app.add_option("--beta2", a->o.adamw.beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--eps", a->o.adamw.epsilon, "AdamW epsilon")->capture_default_str();
  app.add_option("--momentum", a->o.sgd.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--dampening", a->o.sgd.dampening, "SGD dampening")->capture_default_str();
  app.add_option("--sgd-weight-decay", a->o.sgd.weight_decay, "SGD weight decay")->capture_default_str();
  app.add_flag("--nesterov", a->o.sgd.nesterov, "SGD with Nesterov momentum");
  app.add_flag("--maximize", a->o.adamw.maximize, "Maximize the objective instead of minimizing it");
  return [a] {
    a->o.sgd.maximize = a->o.adamw.maximize;
    run_artifacts(*a);
  };
}

const CommandRegistrar reg({"artifacts",
                            "Generate training artifacts (training, eval, optimizer models and checkpoint) from a "
                            "forward model",
                            setup});

}  // namespace
}  // namespace kiln::cli
