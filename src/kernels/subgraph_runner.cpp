// The subgraph runner factory (subgraph_runner.h).
#include "kernels/subgraph_runner.h"

#include <atomic>

#include "kiln/error.h"

namespace kiln {

namespace {
std::atomic<SubgraphRunnerFactory> g_factory{nullptr};
}  // namespace

void set_subgraph_runner_factory(SubgraphRunnerFactory factory) { g_factory.store(factory); }

std::unique_ptr<SubgraphRunner> make_subgraph_runner(Model model) {
  const SubgraphRunnerFactory f = g_factory.load();
  if (f == nullptr) throw Unsupported("running a subgraph (If, Loop, Scan) needs Kiln's runtime, which is not linked");
  return f(std::move(model));
}

}  // namespace kiln
