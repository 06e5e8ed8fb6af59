// Pipeline parallelism (IPUConfig's layers_per_ipu / ipus_per_replica): the model cut into stages
// at layer boundaries, each stage on its own rank, micro-batches flowing through a schedule, and
// activations and their gradients passed between ranks.
//
// The stages are generated from one forward model (generate_pipeline_artifacts): the layers are found
// from node and parameter names, each stage gets the nodes between its cuts, the batch columns it
// reads, and the values it receives from the stage before (relayed on when a later stage reads them).
// A stage that is not the last trains through the vector-Jacobian product of what it sends: its
// training model's loss is sum over sent values v of sum(v * dv), dv fed from the next stage, so its
// parameters' gradients and the gradients of what it received come out of the ordinary gradient
// builder. Its forward pass runs a forward model, and the training model computes the forward again
// before the backward (GPipe's re-materialization): a stage keeps only what it received between the
// two passes. Parameters read by several stages (a tied embedding and LM head) are held by each;
// their gradients are summed over those stages, so the copies update alike.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/artifacts.h"
#include "kiln/distributed.h"
#include "kiln/training.h"

namespace kiln::training {

// A repeated block of the model ("transformer.h.3", "/bert/encoder/layer.3"): the nodes whose names
// (or, for unnamed nodes, whose parameters' names) carry the stem with the most numbered blocks,
// and the positions of its first and last node in the graph.
struct ModelLayer {
  std::string name;
  size_t first = 0, last = 0;
};
// InvalidArgument when the model has no such blocks, or they interleave in the graph.
std::vector<ModelLayer> find_layers(const Model& model);

// What a stage exchanges (its folder's stage.json).
struct StageInfo {
  int index = 0;
  int stages = 1;
  std::vector<std::string> layers;            // the layers it holds
  std::vector<std::string> model_inputs;      // the batch columns it reads
  std::vector<std::string> received;          // values from the previous stage, in transfer order
  std::vector<bool> received_differentiable;  // whose gradients go back
  std::vector<std::string> sent;              // forward model outputs for the next stage, in order
  std::vector<bool> sent_differentiable;      // whose gradients come back
  // Trained parameters held by several stages (the same list on every stage): their elements and
  // the stages that hold them.
  struct Shared {
    std::string name;
    int64_t numel = 0;
    std::vector<int> stages;
  };
  std::vector<Shared> shared;
};

// Writes dir/stage-<s>/ for every stage s (or only `only_stage`): training_model.onnx,
// eval_model.onnx, optimizer_model.onnx (when options.optimizer), checkpoint, stage.json and, for
// every stage but the last, forward_model.onnx. layers_per_stage: how many layers each stage holds
// (their sum is the number of layers); the layers before the first block (embeddings) go with the
// first stage, those after the last (final norm, head, loss) with the last. Mixed precision is
// Unsupported for now. Returns the stages' descriptions.
std::vector<StageInfo> generate_pipeline_artifacts(const Model& forward, const ArtifactOptions& options,
                                                   const std::vector<int64_t>& layers_per_stage, const std::string& dir,
                                                   std::optional<int> only_stage = {});
std::string stage_directory(const std::string& dir, int stage);
StageInfo load_stage_info(const std::string& stage_dir);

// This rank's stage of one pipeline. `pipeline` holds the pipeline's ranks, rank s running stage s.
class PipelineStage {
 public:
  enum class Schedule { GPipe, OneFOneB };
  PipelineStage(const std::string& stage_dir, Module& module, std::shared_ptr<dist::Communicator> pipeline,
                Schedule schedule = Schedule::OneFOneB);
  ~PipelineStage();
  PipelineStage(const PipelineStage&) = delete;
  PipelineStage& operator=(const PipelineStage&) = delete;

  const StageInfo& info() const { return info_; }
  bool is_last() const { return info_.index + 1 == info_.stages; }

  // Forward and backward of the micro-batches (batch columns by name) through every stage, in the
  // schedule's order; each stage's gradients add up in its Module over them (in micro-batch order,
  // as one process accumulating them would). `before_last_backward` runs before the last
  // micro-batch's backward (data parallelism turns its gradient reduction on there). Returns each
  // micro-batch's loss, on every stage.
  std::vector<double> train(const std::vector<std::map<std::string, Tensor>>& micro_batches,
                            const std::function<void()>& before_last_backward = {});
  // Forward only, with the eval models: each batch's loss and the last stage's other outputs (on
  // the last stage; empty elsewhere).
  std::vector<std::vector<Tensor>> evaluate(const std::map<std::string, Tensor>& batch);
  // The shared parameters' gradients summed over the stages (every stage calls it).
  void reduce_shared_gradients();
  // The sum over the stages of a value (each stage's share of a norm); the last stage's broadcast.
  double sum(double value) const;

  // The last train(): seconds this stage computed, and seconds it waited for the others.
  double compute_seconds() const { return compute_seconds_; }
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct Impl;
  StageInfo info_;
  std::unique_ptr<Impl> impl_;
  double compute_seconds_ = 0, wait_seconds_ = 0;
};

}  // namespace kiln::training
