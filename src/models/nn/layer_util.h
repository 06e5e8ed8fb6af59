// Helpers shared by the kiln::nn layer files: input checks, Python-style repr pieces, and the
// output-size arithmetic of convolution and pooling (with -1 for a dynamic dimension).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/nn/layers.h"

namespace kiln::nn::detail {

// The one input of a one-input module; InvalidArgument naming the module otherwise.
const Var& single_input(const Module& m, const std::vector<Var>& inputs);
// TypeError unless x is floating point, or (with `param`) of the dtype of the module's parameters.
void require_float(const Module& m, const Var& x);
void require_dtype(const Module& m, const Var& x, const Var& param);

// Python's str() of a float ("1e-05", "0.1", "1.0") and of a bool ("True").
std::string py_float(double v);
std::string py_bool(bool v);
// Python's repr of a tuple of ints: "(3,)", "(3, 4)".
std::string py_tuple(const std::vector<int64_t>& v);
// "[2, -1, 3]" (-1 for a dynamic dim).
std::string shape_text(const std::vector<int64_t>& shape);

// floor((in + pads - dilation * (kernel - 1) - 1) / stride) + 1, or torch's ceil_mode rule (the
// last window must start inside the input or its left padding); -1 when `in` is dynamic.
int64_t window_out_dim(int64_t in, int64_t kernel, int64_t stride, int64_t pad_begin, int64_t pad_end, int64_t dilation,
                       bool ceil_mode = false);

// Runs `f` on x with its batch dimension: torch's modules also accept an unbatched input (rank
// batched_rank - 1), which is unsqueezed before and squeezed after. Other ranks are a ShapeError in
// torch's words: "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [...]".
Var with_batch_dim(Tracer& t, const Var& x, int64_t batched_rank, const std::string& op_name,
                   const std::function<Var(const Var&)>& f);

// ONNX attribute of a list of ints.
inline Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }
// ONNX's pads: begins for every spatial dim, then ends.
std::vector<int64_t> symmetric_pads(const std::vector<int64_t>& pads);

}  // namespace kiln::nn::detail
