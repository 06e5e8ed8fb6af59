// The plan cache (SessionOptions::plan_cache_dir; in the Trainer, the IPUConfig's
// executable_cache_dir): what a Session decides about a model before any kernel runs, kept in
// files so that a later process loads it instead of deciding again --
//   - the graph as the Session runs it, after the fusions and the layout pass (ir/fusion.h), as
//     ONNX; the initializers it shares with the model as given are named, not copied;
//   - per input signature, the memory plan: each arena buffer's size, lifetime and offset.
// Shapes are still inferred and kernels still made and prepared (oneDNN creates its primitives
// then: JIT code that oneDNN cannot persist on CPU). A cached memory plan is used only where the
// buffers the planner asks for are the ones it was made for, and after its offsets check out
// (memory_plan_fits): a stale entry cannot place a value wrong.
//
// Entries: <dir>/plans/<model key>/graph.kplan and <dir>/plans/<model key>/<signature hash>.kplan,
// each one header line (a magic word, then JSON: what the entry is for, its payload's size and
// CRC-32) and the payload, written atomically (temporary file, fsync, rename). The model key covers
// the model's content (onnx/model_key.h), SessionOptions::fuse, Kiln's version and the library
// build. An entry that does not check out is ignored with a warning on stderr and written again; a
// cache that cannot be written is a warning, never an error of the run. Models with subgraphs (If,
// Loop, Scan) are not cached: their captures are lifted per Session.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "runtime/memory_plan.h"

namespace kiln {

class PlanCache {
 public:
  // The cache for `model` (as given to the Session, before fusion) under `dir`; nullptr for a
  // model with subgraphs.
  static std::unique_ptr<PlanCache> open(const std::string& dir, const Model& model, bool fuse);

  // The stored graph for `model`, with the model's own initializers put back in; nullopt when there
  // is no entry or it does not check out (then with a warning).
  std::optional<Model> load_graph(const Model& model) const;
  // Stores `planned` (the graph the Session plans) for the model whose initializers were `given`.
  void store_graph(const Model& planned, const std::map<std::string, Tensor>& given) const;

  // The stored memory plan for input signature `signature` if it places exactly `requests`.
  std::optional<MemoryPlan> load_memory_plan(const std::string& signature,
                                             const std::vector<BufferRequest>& requests) const;
  void store_memory_plan(const std::string& signature, const std::vector<BufferRequest>& requests,
                         const MemoryPlan& plan) const;

  const std::string& key() const { return key_; }
  // The entry files (for tests and tools).
  std::string graph_path() const;
  std::string memory_plan_path(const std::string& signature) const;

 private:
  PlanCache(std::string folder, std::string key) : folder_(std::move(folder)), key_(std::move(key)) {}
  std::string folder_;  // <dir>/plans/<key>
  std::string key_;
};

}  // namespace kiln
