// Mixed precision as a graph pass, after torch.autocast on CPU: the ops that are matrix products
// (MatMul, Gemm, Conv, ConvTranspose, and Kiln's FusedMatMul and Attention) read their float32
// operands cast to bfloat16 (or float16) and their outputs are cast back to float32 at once. Everything else
// (softmax, LayerNorm, BatchNorm and its statistics, losses, reductions, exp/log, elementwise ops)
// stays in float32, as do the parameters: a weight is cast on its way into the product, so the
// master copy, its gradient (Cast's gradient casts back) and the optimizer state are float32.
// Attention's mask and bias inputs stay float32 (a float32 -inf or finfo.min mask must not round).
//
// The gradient builder runs it on the fused forward graph, so each product's backward (dA = dY B^T,
// dB = A^T dY, ConvGrad, AttentionGrad) runs in bfloat16 too, and the eval model gets the same
// pass. Inserted Casts are named "<value>/autocast_bf16" or "/autocast_fp16" (operands) and
// "<value>/autocast_float" (results), which strip_autocast undoes for a float32 inference export.
#pragma once

#include <cstddef>

#include "kiln/graph.h"

namespace kiln {

// Rewrites every product whose output is float32 by the graph's hints (run ONNX shape inference
// first). One Cast serves all the products that read the same operand. Returns how many products
// now compute in `low` (BFloat16 or Float16). Keeps the nodes in topological order.
size_t autocast(Model& model, DType low);

// Undoes autocast: every product reads and writes float32 again and the Casts are gone. Returns how
// many Casts it removed.
size_t strip_autocast(Model& model);

// The metadata key artifacts carry when their graphs went through autocast ("bf16", "fp16").
inline constexpr const char* kMixedPrecisionKey = "kiln.mixed_precision";

}  // namespace kiln
