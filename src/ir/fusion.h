// Graph fusions: chains of standard ops that exporters write for one function, rewritten into the
// one node Kiln runs in a single pass. The gradient builder runs them on the forward graph (so the
// backward is built from the fused node's own gradient), and a Session on the graph it plans
// (SessionOptions::fuse), where a chain whose intermediate values something else reads (a
// training graph's backward) is left alone.
//
// fuse_gelu: x/2 (1 + erf(x/sqrt 2)) and x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as
// torch.onnx exports nn.GELU / F.gelu and as Hugging Face's GELU classes are written, in any
// operand order: Div(x, sqrt 2) or Mul(x, 1/sqrt 2); x^3 as Pow(x, 3) or Mul(x, Mul(x, x)); the
// half applied last or to x first. Each becomes ai.kiln.Gelu (attribute approximate "none" or
// "tanh"), named after the chain's Erf or Tanh node ("/mlp/Erf" -> "/mlp/Gelu").
//
// fuse_masked_softmax: attention's masked softmax as torch.onnx exports masked_fill / torch.where
// before F.softmax (opset 13 on, last axis, a float32 or float64 output by the graph's dtype
// hints): Softmax(Where(cond, fill, X)) or Softmax(Where(cond, X, fill)), fill a scalar constant,
// with X = S * k, k * S or S / k (the scores' scale) when only the Where reads X. It becomes
// ai.kiln.MaskedSoftmax(S, cond) (attributes scale, fill, fill_where), one pass over the scores
// instead of three, and one ai.kiln.MaskedSoftmaxGrad pass in the backward.
//
// fuse_attention: attention's MatMul(Softmax(Z), V) with Z = MatMul(Q, Kt), scaled (Mul or Div by a
// constant, also through a Cast), plus an additive bias (nn.MultiheadAttention's padding mask), or
// an ai.kiln.MaskedSoftmax's masked scores, when Q, Kt and V have rank >= 2 by the graph's hints
// and a float32 or float64 output. It becomes ai.kiln.Attention(Q, Kt, V, mask, bias), which makes
// the probabilities a block of query rows at a time in cache. In a training graph it keeps them for
// the backward (one ai.kiln.AttentionGrad) while they are small, and above 64 MiB per node the
// backward recomputes them instead: long sequences train without [.., Sq, Sk] per layer in memory.
#pragma once

#include <cstddef>

#include "kiln/graph.h"

namespace kiln {

// Fuses every GELU chain whose intermediate values only the chain reads; returns how many. Imports
// the ai.kiln domain when it fuses any. Constant nodes left unread are removed.
size_t fuse_gelu(Model& model);
size_t fuse_masked_softmax(Model& model);
// After fuse_masked_softmax. `for_training` (the gradient builder's forward graph) gives each fused
// node a second output, the probabilities, which it fills when it keeps them for the backward.
size_t fuse_attention(Model& model, bool for_training = false);
// After fuse_attention: the Transposes that split a projection into heads, and the one that joins
// the heads back (nn.MultiheadAttention's [S, B*H, D] <-> [B*H, S, D], Hugging Face's [B, S, H, D]
// <-> [B, H, S, D], the keys' to [.., D, Sk]), folded into ai.kiln.Attention's perm_q, perm_kt,
// perm_v and perm_y attributes: the node reads Q, Kt and V where the projections wrote them and
// writes Y where the output projection reads it, and its gradient (AttentionGrad, with the same
// attributes) reads dY and writes dQ, dKt and dV likewise: no copies of either. A Transpose folds
// when only the node reads it (or only the node's Y feeds it) and it keeps the matrices' columns
// the stored last axis (Kt: its rows or its columns); a Q or Kt scaled by a constant (Div, Mul),
// only the node reading it, goes into the node's scale. Float32 and float64 nodes by the hints:
// 16-bit attention keeps its operands packed for attention_bf16.h's batched products. Returns
// how many nodes it rewrote.
size_t fold_views_into_attention(Model& model);
// Dropout that is the identity by its constant inputs (ratio 0, or training_mode false or absent;
// before opset 12 a ratio attribute of 0), whose mask nothing reads, becomes an Identity: no copy,
// no mask, and no gradient pass (a module exported in training mode with dropout=0.0 has them).
size_t drop_inactive_dropout(Model& model);
// MatMul(A, Transpose(B)) (and Transpose(A) on the left) with a perm that swaps the last two axes
// only, the Transpose read by nothing else, and a float32 or float64 output by the hints: an
// ai.kiln.FusedMatMul reading the operand transposed in place (transA / transB), no copy. A torch
// Linear exports as MatMul(X, Transpose(W)): its weight is no longer copied in every forward, and
// its gradient comes out in W's own layout (no Transpose of the gradient either). Runs after
// fuse_attention, whose MatMuls it would otherwise take. Returns how many MatMuls it rewrote.
size_t fold_transposes_into_matmul(Model& model);
// Mixed precision's MatMul / FusedMatMul in bfloat16 or float16 (by the hints) whose result only a
// Cast to float32 reads (autocast's result Casts, ir/autocast.h): one ai.kiln.FusedMatMul with
// out_dtype = float, whose kernel writes the float32 accumulator directly: no 16-bit rounding of
// the result and no pass over it. Runs last, in Sessions only (not for_training). Returns how
// many products it rewrote.
size_t fold_result_casts_into_products(Model& model);
// Mixed precision's Cast to bfloat16 or float16 of a value that only the Cast reads (directly or
// through a Reshape), made by a node that can write 16 bits itself (out_dtype), by the hints: an
// ai.kiln.Gelu of a float32 X (the next product's operand), or the scores' gradient of a
// SoftmaxCrossEntropyLoss over float32 [N, C] scores (the gradient a language model's head product
// reads). The node rounds each block of results as it makes it: no float32 result in memory and no
// pass over it. Sessions only, last. Returns how many it folded.
size_t fold_16_bit_casts(Model& model);
// Identity(x) -> y where only the Identity reads x, which a node writes: that node writes y itself
// and the Identity goes (the gradient builder names each gradient output through one). A graph
// output y is then written where it is computed: no copy, and a caller waiting for it (Session's
// output_ready) hears of it then. Sessions only (not for_training). Returns how many it removed.
size_t forward_identities(Model& model);
// The layout pass, Sessions only (not for_training): regions of float32 2-D convolutional networks
// (Conv, MaxPool, AveragePool, GlobalAveragePool / GlobalMaxPool, BatchNormalization, and the
// elementwise ops between them: activations, Add / Mul / ... with each other or with constants)
// hold their activations channels last ([N, H, W, C]), the layout oneDNN's convolution kernels read
// and write, instead of reordering to and from it at every convolution. Conv becomes
// ai.kiln.ConvChannelsLast (the first one of a region reads the channels-first input itself; an Add
// alone reading a convolution, its other operand channels last, and then a Relu alone reading that,
// are applied by oneDNN as it writes: ResNet's residual); the pools and BatchNormalization
// become their ai.kiln.*ChannelsLast ops (a global pool writes [N, C, 1, 1] channels first, the
// same bytes); elementwise ops stay as they are over permuted operands (a constant operand gets a
// permuted copy). In a training graph the backward joins the regions: ConvGrad, BatchNormalizationGrad,
// MaxPoolGrad, AveragePoolGrad and GlobalAveragePoolGrad reading channels-last dY (and X) become their
// *ChannelsLast ops writing dX channels last (a first layer's dX, of the graph's input, channels
// first), ReluGrad and GeluGrad run over the permuted operands. Every value something outside the
// region reads (or the graph returns) gets a Transpose back under its own name. A region is
// rewritten only with at least two convolutions per such Transpose: a lone Conv stays. Returns how
// many nodes it rewrote.
size_t to_channels_last(Model& model);
// SoftmaxCrossEntropyLoss(Reshape(Slice(X, [start], [end], [axis], [1]), [n, C]), Reshape(labels, [m]))
// over scores X [..., C] sliced on another axis, labels shaped as the sliced scores without the
// classes (by the hints), reduction mean or sum, log_prob not read: a causal language model's
// shifted loss (logits[..., :-1, :] against labels[..., 1:]). The loss reads Reshape(X, [-1, C])
// and the labels padded back to X's extent with ignore_index (the loss's own, else the labels'
// dtype's lowest value, which it then gets), Reshape(Pad(labels), [-1]): the same loss, and no
// slice of the logits in the forward nor its padding in the backward. Needs opset 13 (Pad's
// inputs) and the axis's extent by the hints unless start >= 0 and end < 0 or to the end. Runs
// before the gradient builder and in Sessions. Returns how many losses it rewrote.
size_t fold_score_slices_into_labels(Model& model);
// Sum(SliceGrad(dY_1, Shape(x), [s_1], [e_1], [axis]), ...) over slices of x that partition the
// axis (steps 1, constant bounds side by side from 0 to the end, or to the extent by the hints),
// each SliceGrad read by the Sum alone: Concat(dY_1, ..., axis), the parts side by side instead of
// one zero-filled full-size tensor per part and their sum (the backward of torch's chunk and
// split as Slices, as nn.MultiheadAttention's packed projection exports). Sessions only. Returns
// how many Sums it rewrote.
size_t join_slice_gradients(Model& model);
// A training graph's SoftmaxCrossEntropyLoss(scores, labels[, weights]) and its gradient from the
// scores, ai.kiln.SoftmaxCrossEntropyLossGrad(dY, scores, labels[, weights]) with the same
// reduction and ignore_index: one ai.kiln.SoftmaxCrossEntropyLossAndGrad(dY, scores, labels[,
// weights]) -> (dScores, loss[, dWeights]) where the gradient was, one pass over the scores instead
// of two. Only when nothing before the gradient reads the loss (a training graph returns it; dY is
// then not made from it) and the forward's log_prob is not read. Runs after forward_identities (the
// loss's naming Identity, read before the backward, is gone by then); Sessions only. Returns how
// many losses it fused.
size_t fuse_loss_with_gradient(Model& model);
// Every pass above; returns how many nodes were rewritten. `attention_views` false leaves
// fold_views_into_attention out: the gradient builder's forward graph under mixed precision, whose
// attention autocast then casts to bfloat16 (attention_bf16.h's products read packed operands).
size_t fuse(Model& model, bool for_training = false, bool attention_views = true);

}  // namespace kiln
