// `kiln-nn-export core-files DIR`: the files of tests/python/test_nn_core.py (torch parity of the nn
// core, onnx.checker). Builds Linear(4, 5) -> BatchNorm1d(5) -> ReLU -> Linear(5, 3) from the
// test-only modules written against module.h alone (tests/models/nn/nn_test_modules.h, so that the
// core is checked without the layer library), and writes into DIR
//   weights_init.safetensors   the state_dict before any run
//   train.onnx / eval.onnx     exports in training mode (dynamic batch) and in eval mode
//   x.npy                      the input
//   y_train.npy                the output of the second training-mode run (operator())
//   state_after.safetensors    the state_dict after the two training runs (running statistics)
//   y_eval.npy                 the output of an eval-mode run after them
#include <cmath>
#include <filesystem>

#include "kiln/npy.h"
#include "models/nn/nn_test_modules.h"
#include "spec_exports.h"

namespace kiln::nn_export {

void write_core_files(const std::string& out_dir) {
  using namespace kiln::nn;
  using namespace kiln::nn::testing;
  const std::filesystem::path dir(out_dir);
  std::filesystem::create_directories(dir);
  manual_seed(7);
  auto net = std::make_shared<Sequential>(
      std::vector<ModulePtr>{std::make_shared<TLinear>(4, 5), std::make_shared<TBatchNorm1d>(5),
                             std::make_shared<TRelu>(), std::make_shared<TLinear>(5, 3)});
  net->save_safetensors((dir / "weights_init.safetensors").string());
  net->export_onnx((dir / "train.onnx").string(), {{"input", {2, 4}}},
                   {{"input", {{0, "batch"}}}, {"output", {{0, "batch"}}}});
  Tensor x = Tensor::empty(DType::Float32, {6, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(1.5 * std::sin(0.9 * double(i) + 0.2) + 0.3);
  save_npy(x, (dir / "x.npy").string());
  (*net)({x});
  save_npy((*net)({x})[0], (dir / "y_train.npy").string());
  net->save_safetensors((dir / "state_after.safetensors").string());
  net->eval();
  net->export_onnx((dir / "eval.onnx").string(), {{"input", {2, 4}}}, {{"input", {{0, "batch"}}}});
  save_npy((*net)({x})[0], (dir / "y_eval.npy").string());
}

}  // namespace kiln::nn_export
