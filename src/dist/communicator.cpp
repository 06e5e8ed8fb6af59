// world(): the MPI communicator when an MPI launcher started this process, else a world of one
// (kiln/distributed.h).
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "dist/mpi_communicator.h"
#include "kiln/distributed.h"
#include "kiln/error.h"

namespace kiln::dist {
namespace {

std::atomic<double> g_timeout{1800.0};

// One process: every collective is already complete.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string backend() const override { return "none"; }
  void allreduce_sum(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
  void broadcast(void*, size_t, int root) override { check_root(root); }
  std::vector<std::string> allgather(const std::string& bytes) override { return {bytes}; }
  void barrier() override {}
  std::shared_future<void> allreduce_sum_async(float*, size_t) override { return done(); }
  std::shared_future<void> reduce_scatter_sum_async(float*, std::vector<size_t> counts) override {
    check_counts(counts);
    return done();
  }
  std::shared_future<void> allgather_async(float*, std::vector<size_t> counts) override {
    check_counts(counts);
    return done();
  }
  std::shared_future<void> send_async(const void*, size_t, int dest, int) override { return no_peer(dest); }
  std::shared_future<void> recv_async(void*, size_t, int source, int) override { return no_peer(source); }
  void wait(const std::shared_future<void>& done, const std::string&) override { done.get(); }
  std::shared_ptr<Communicator> split(int, int) override { return std::make_shared<SingleProcess>(); }
  [[noreturn]] void abort(const std::string& message) override {
    throw Error(fmt::format("the run cannot go on: {}", message));
  }

 private:
  static std::shared_future<void> done() {
    std::promise<void> ready;
    ready.set_value();
    return ready.get_future().share();
  }
  [[noreturn]] static std::shared_future<void> no_peer(int rank) {
    throw InvalidArgument(fmt::format("a transfer with rank {} in a world of one (no other rank)", rank));
  }
  static void check_counts(const std::vector<size_t>& counts) {
    if (counts.size() != 1)
      throw InvalidArgument(fmt::format("a collective over {} segments in a world of one", counts.size()));
  }
  static void check_root(int root) {
    if (root != 0) throw InvalidArgument(fmt::format("broadcast from rank {} in a world of one", root));
  }
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (end != nullptr && *end == '\0' && n > 0 && n < (1 << 30)) ? static_cast<int>(n) : 0;
}

}  // namespace

int launched_world_size() {
  // Open MPI's mpirun, MPICH's and Intel MPI's hydra (PMI), MVAPICH.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"})
    if (const int n = env_int(name)) return n;
  return 1;
}

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"})
    if (env_int(name)) return true;
  return false;
}

std::shared_ptr<Communicator> single_process() { return std::make_shared<SingleProcess>(); }

std::shared_ptr<Communicator> world() {
  static std::mutex mutex;
  static std::shared_ptr<Communicator> made;
  const std::lock_guard lock(mutex);
  if (made) return made;
  if (!launched_by_mpi()) return made = single_process();
  if (!built_with_mpi()) {
    if (launched_world_size() > 1)
      throw Unsupported(fmt::format(
          "this process is one of {} ranks started by an MPI launcher, but this Kiln was built without MPI; "
          "install Open MPI (scripts/setup.sh installs openmpi-bin and libopenmpi-dev) and rebuild",
          launched_world_size()));
    return made = single_process();
  }
  return made = make_mpi_communicator();
}

void set_timeout(double seconds) {
  if (!(seconds > 0))
    throw InvalidArgument(fmt::format("the collectives' timeout must be > 0 seconds, got {}", seconds));
  g_timeout = seconds;
}

double timeout() { return g_timeout; }

}  // namespace kiln::dist
