// How kernels run a subgraph (the branches and bodies of If, Loop and Scan): through a runner that
// the runtime layer provides (a Session, runtime/session.cpp), since kernels sit below it. The
// runtime registers its factory when it is linked; a process without it cannot run subgraphs and
// says so.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "kiln/graph.h"
#include "kiln/tensor.h"

namespace kiln {

class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  // Runs the model with these graph inputs; returns its outputs by name.
  virtual std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& feeds) = 0;
};

using SubgraphRunnerFactory = std::unique_ptr<SubgraphRunner> (*)(Model model);

void set_subgraph_runner_factory(SubgraphRunnerFactory factory);
// A runner for `model`; Unsupported when no runtime registered a factory.
std::unique_ptr<SubgraphRunner> make_subgraph_runner(Model model);

}  // namespace kiln
