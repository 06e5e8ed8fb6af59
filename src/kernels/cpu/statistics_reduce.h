// Batch statistics summed across the ranks of a data-parallel run (torch's SyncBatchNorm): a
// BatchNormalization node in training mode, or its gradient, whose attribute sync_statistics is 1
// sums its per-channel statistics over every rank's batch through the reduction set here, so each
// rank normalizes with the statistics of the whole global batch. The training layer sets it
// (training::Module::sync_batch_norm over a kiln::dist::Communicator); the kernels know nothing of
// the communicator.
#pragma once

#include <cstddef>
#include <functional>

#include "kiln/graph.h"

namespace kiln {

// Sums `n` doubles in place over the ranks. Every rank calls it at the same nodes, in the same order.
using StatisticsReduce = std::function<void(double* values, size_t n)>;
void set_statistics_reduce(StatisticsReduce reduce);

// Whether `node` asks for synchronized statistics; Unsupported when it does and no reduction is set.
bool syncs_statistics(const Node& node);
// Sums `values` over the ranks (the identity when node does not sync).
void reduce_statistics(const Node& node, double* values, size_t n);

}  // namespace kiln
