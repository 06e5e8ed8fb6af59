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
