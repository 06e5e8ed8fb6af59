// A whole graph in 16 bits, as Hugging Face's bf16_full_eval / fp16_full_eval run a model cast with
// model.to(torch.bfloat16), and as a float16 inference export stores it: every float32 value the
// graph computes becomes `low` (bfloat16 or float16), the float32 initializers and constants are
// rounded to it, and the float32 graph inputs and outputs keep their type (a Cast after each input,
// one before each output), so callers feed and read float32 as before.
//
// What stays float32: values that must be float32 by ONNX's type constraints (Resize's roi and
// scales, Upsample's scales) and everything that only feeds them. Each op then runs in `low`: on a
// 16-bit kernel where Kiln has one, else on its float32 kernel with the result rounded to `low`
// (kernels/cpu/low_precision.h), so each op's output carries 16-bit precision as it would on
// 16-bit hardware.
//
//   infer_shapes(model);                        // the pass reads the dtype hints
//   to_low_precision(model, DType::BFloat16);
#pragma once

#include <cstddef>

#include "kiln/graph.h"

namespace kiln {

// Rewrites `model` as above and returns how many values and constants changed type. Throws
// Unsupported for a `low` other than BFloat16 and Float16, and InvalidArgument for a model already
// in mixed precision (autocast's products: the two passes do not compose).
size_t to_low_precision(Model& model, DType low);

// Stores every float32 initializer of `model` in `low`, read through a Cast back to float32 (the
// computation stays float32; runtimes fold the Casts at load): a model file half the size. Returns
// how many initializers changed.
size_t store_initializers_in(Model& model, DType low);

// The metadata key a graph rewritten by to_low_precision carries ("bf16" or "fp16").
inline constexpr const char* kFullPrecisionKey = "kiln.full_precision";

}  // namespace kiln
