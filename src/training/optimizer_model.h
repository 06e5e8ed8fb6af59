// The optimizer model: one ai.kiln update node per trainable parameter, reading the learning rate,
// the step count, the parameter, its gradient and its optimizer slots, and writing the new values.
// Every update op has the same layout, which the Optimizer relies on to run it in place:
//
//   inputs:  learning_rate (float []), step (int64 []), X, G, slot_0, slot_1, ...
//   outputs: X_new, slot_0_new, slot_1_new, ...    (output 0 replaces input 2, output k input 3 + k)
//
// Slots are positional: a slot a node does not have is an empty name (SGD without momentum has
// none; Adafactor's depend on the parameter's rank), and a slot's shape may differ from the
// parameter's (Adafactor's factored second moments).
#pragma once

#include <string>
#include <vector>

#include "kiln/artifacts.h"
#include "kiln/graph.h"

namespace kiln::training {

struct UpdateOp {
  std::string type;                // "AdamW"
  std::string op_type;             // "AdamWStep" (domain ai.kiln)
  std::vector<std::string> slots;  // "exp_avg", "exp_avg_sq": slot i is input 4 + i, output 1 + i
  // The shape of a slot for a parameter of shape `param`; nullptr: the parameter's.
  Shape (*slot_shape)(const std::string& slot, const Shape& param) = nullptr;
  // The elements of each slot are the parameter's own (ZeRO can cut them into ranges).
  bool elementwise() const { return slot_shape == nullptr; }
};

// The update op of an optimizer type, or of an op type; nullptr when there is none.
const UpdateOp* update_op_for_type(const std::string& type);
const UpdateOp* update_op_for_node(const Node& node);

struct NodeSlot {
  size_t position;  // index into UpdateOp::slots
  std::string name;
};
// The slots a node has (its non-empty slot inputs), in order.
std::vector<NodeSlot> node_slots(const Node& node, const UpdateOp& op);
Shape slot_shape(const UpdateOp& op, const std::string& slot, const Shape& param);

inline constexpr size_t kUpdateFirstSlot = 4;  // inputs before the slots: lr, step, X, G

struct OptimizerParameter {
  std::string name;
  DType dtype;
  Shape shape;
};

Model build_optimizer_model(OptimType type, const std::vector<OptimizerParameter>& params,
                            const ArtifactOptions& options);

// Metadata keys of the optimizer model.
inline const std::string kOptimizerTypeKey = "kiln.optimizer";
inline const std::string kLearningRateKey = "kiln.learning_rate";

}  // namespace kiln::training
