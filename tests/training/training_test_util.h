// Small models and artifact folders for the training API tests.
#pragma once

#include <filesystem>
#include <string>

#include "kiln/artifacts.h"
#include "kiln/graph.h"
#include "kiln/tensor.h"

namespace kiln::testing {

// x[N, 4] -> Linear(4, 6) -> BatchNormalization (training mode, running statistics as outputs)
// -> Relu -> Linear(6, 3) -> logits[N, 3]. Also a float initializer "mask" that only feeds a
// comparison (no gradient reaches it) and is added to nothing differentiable.
Model make_bn_mlp(uint64_t seed = 7);

// An empty folder under this test process's temporary root (removed when the process ends).
std::filesystem::path fresh_dir(const std::string& name);

// Writes artifacts for make_bn_mlp with CrossEntropyLoss and the given optimizer.
std::filesystem::path write_bn_mlp_artifacts(const std::string& name, training::OptimType optim,
                                             training::ArtifactOptions options = {});

Tensor random_tensor(Shape shape, uint64_t seed);
Tensor class_labels(int64_t n, int64_t classes, uint64_t seed);
// Token ids [batch, seq] in [0, vocab): (7 i + 3) mod vocab over the flat index i.
Tensor token_ids(int64_t batch, int64_t seq, int64_t vocab);

}  // namespace kiln::testing
