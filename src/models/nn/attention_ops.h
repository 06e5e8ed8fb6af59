// Small emitters for the attention and transformer layers: one ONNX node each, with the output
// shape computed here (the Tracer does not infer; -1 is a dimension known only at run time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn::attn {

// numpy broadcasting of two shapes with -1 for unknown dims; ShapeError naming `what` when two
// known dims disagree.
std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                      const std::string& what);

Var binary(Tracer& t, const std::string& op, const Var& a, const Var& b);  // Add, Sub, Mul, Div
Var matmul(Tracer& t, const Var& a, const Var& b);                         // batched, broadcasting
Var transpose(Tracer& t, const Var& x, const std::vector<int64_t>& perm);
// Reshape to `target` (ONNX's 0 copies the input dim, -1 is inferred); the traced shape follows.
Var reshape(Tracer& t, const Var& x, const std::vector<int64_t>& target);
Var unsqueeze(Tracer& t, const Var& x, const std::vector<int64_t>& axes);  // axes sorted, >= 0
Var squeeze(Tracer& t, const Var& x, const std::vector<int64_t>& axes);
Var where(Tracer& t, const Var& cond, const Var& a, const Var& b);
// x * 0.5 * (1 + erf(x * sqrt(0.5))): torch's exact F.gelu from ops every opset-17 reader has.
Var gelu(Tracer& t, const Var& x);
Var relu(Tracer& t, const Var& x);

}  // namespace kiln::nn::attn
