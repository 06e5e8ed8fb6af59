// The processes of a distributed run and the collectives between them (data-parallel training,
// ZeRO). MPI is the first backend: `mpirun -np N kiln train ...` starts N ranks, and world() finds
// them from the environment mpirun sets. A process started alone is a world of one, whose
// collectives return at once. The interface is what a GPU backend (NCCL) would implement too.
//
//   auto comm = kiln::dist::world();
//   comm->allreduce_sum(grad.data<float>(), grad.numel());      // every rank calls, same order
//   auto pending = comm->allreduce_sum_async(bucket, count);    // runs on the communication thread
//   ...                                                          // compute on
//   pending.wait();
//
// Collectives wait at most timeout() seconds (TrainingArguments::ddp_timeout); past that the rank
// ends the whole job with an error naming the collective, instead of hanging on a rank that died.
#pragma once

#include <cstddef>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace kiln::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank and count of the ranks on this host (the HF Trainer's local_process_index).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // "mpi", or "none" for a process alone.
  virtual std::string backend() const = 0;

  // Collectives: every rank calls the same ones in the same order. Blocking.
  virtual void allreduce_sum(float* data, size_t count) = 0;
  virtual void allreduce_sum(double* data, size_t count) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Every rank's bytes (of any length), on every rank, in rank order.
  virtual std::vector<std::string> allgather(const std::string& bytes) = 0;
  virtual void barrier() = 0;
  // allreduce_sum started on the communication thread, so that computation goes on meanwhile.
  // `data` must stay valid and untouched until the future is ready; get() rethrows its error.
  virtual std::shared_future<void> allreduce_sum_async(float* data, size_t count) = 0;
  // ZeRO's collectives, on a buffer of size() consecutive segments, segment r of counts[r] elements
  // (the same counts on every rank; a count may be 0):
  //  - reduce-scatter: every rank gives its whole buffer; when done, segment rank() holds the
  //    element-wise sum over the ranks (the other segments are left unspecified);
  //  - allgather: every rank gives its segment rank(); when done, every segment holds its rank's.
  // Started on the communication thread like allreduce_sum_async.
  virtual std::shared_future<void> reduce_scatter_sum_async(float* data, std::vector<size_t> counts) = 0;
  virtual std::shared_future<void> allgather_async(float* data, std::vector<size_t> counts) = 0;
  // Point-to-point transfers between two ranks (pipeline stages): `bytes` bytes to rank `dest` /
  // from rank `source`, matched by tag and posting order; started on the communication thread like
  // the collectives (a send does not wait for its receive to be posted). The buffer must stay valid
  // and untouched until the future is ready. InvalidArgument for a rank outside the world or this
  // rank itself.
  virtual std::shared_future<void> send_async(const void* data, size_t bytes, int dest, int tag) = 0;
  virtual std::shared_future<void> recv_async(void* data, size_t bytes, int source, int tag) = 0;
  // Waits for a transfer or collective future at most timeout() seconds, then ends the job naming
  // `what` (a rank that died would leave the others waiting forever).
  virtual void wait(const std::shared_future<void>& done, const std::string& what) = 0;
  // The ranks that pass the same color, ordered by key, as a communicator of their own (MPI's
  // Comm_split): every rank of this communicator calls it. Its collectives involve those ranks only.
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;
  // Seconds the collectives have taken so far on this rank (from start to end of each, waiting
  // for the other ranks included): the communication time a benchmark reports.
  virtual double busy_seconds() const { return 0; }
  // Ends every rank of the job with this message (a rank that cannot go on: the others would
  // wait for it forever).
  [[noreturn]] virtual void abort(const std::string& message) = 0;
};

// This process's world: MPI's when the process was started by an MPI launcher (and Kiln was built
// with MPI), else a world of one. Made on first use, kept for the process; MPI is finalized at
// exit. Unsupported when started by a launcher with more than one rank in a build without MPI.
std::shared_ptr<Communicator> world();
// Whether an MPI launcher (mpirun, mpiexec, srun) started this process, and how many ranks,
// from its environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE, ...): 1 when none did.
int launched_world_size();
bool built_with_mpi();

// How long a collective may wait for the other ranks, in seconds (default 1800, HF's ddp_timeout).
void set_timeout(double seconds);
double timeout();

// A world of one: what world() gives a process started alone. For tests of code that takes a
// Communicator.
std::shared_ptr<Communicator> single_process();

}  // namespace kiln::dist
