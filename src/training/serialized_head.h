// The LM-head serialization (IPUConfig's embedding_serialization_factor and
// projection_serialization_factor, ArtifactOptions::lm_head_chunks): in the training model, the
// language-model head's MatMul and the SoftmaxCrossEntropyLoss that reads its logits become one
// ai.kiln.LinearCrossEntropy over that many blocks of the vocabulary, so that the rows x vocabulary
// logits and their gradient never exist whole.
//
// What it recognises, from the loss back: SoftmaxCrossEntropyLoss (mean or sum, no class weights,
// log_prob unused) <- Reshape / Flatten / Identity / Slice (constant axes, not the classes) /
// Transpose (of the rows, or the classes moved to axis 1 right before the loss) <- MatMul or Gemm
// (no bias) with a weight matrix of the model, as is or through Transpose (a tied embedding). Those
// ops are replayed on the head's input (d features where the logits have V classes), whose rows
// are then the loss's, and Shape reads of the dropped values read their twins' instead (torch
// exports view(-1, logits.size(-1)) so). The logits may be read by nothing else but the graph's
// outputs, from which they are removed: the training model then returns its loss and other
// outputs without them.
#pragma once

#include <cstdint>

#include "kiln/graph.h"

namespace kiln::training {

// Rewrites `m` (a forward model with its loss) in place. Throws Unsupported, naming what stood in
// the way for each cross-entropy it looked at, when there is no head to serialize.
void serialize_lm_head(Model& m, int64_t chunks);

}  // namespace kiln::training
