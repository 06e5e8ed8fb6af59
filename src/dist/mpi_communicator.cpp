// The MPI communicator. One communication thread initializes MPI and makes every MPI call, in the
// order the collectives were posted, so that a collective started asynchronously runs while the
// caller computes; the caller waits on a future, at most timeout() seconds, then ends the job.
#include <fmt/format.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "dist/mpi_communicator.h"
#include "kiln/error.h"

#ifdef KILN_HAVE_MPI
// The C API only: Open MPI's and MPICH's headers otherwise pull in their deprecated C++ bindings,
// whose library a C link does not bring.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace kiln::dist {

#ifndef KILN_HAVE_MPI

bool built_with_mpi() { return false; }
std::shared_ptr<Communicator> make_mpi_communicator() {
  throw Unsupported("this Kiln was built without MPI");
}

#else

bool built_with_mpi() { return true; }

namespace {

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(fmt::format("MPI {} failed: {}", what, std::string(text, static_cast<size_t>(length))));
}

// Element counts past INT_MAX go in several calls.
constexpr size_t kChunk = static_cast<size_t>(INT_MAX) / 8;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    std::promise<void> started;
    auto ready = started.get_future();
    thread_ = std::thread([this, &started] { loop(started); });
    ready.get();  // MPI_Init's error, if any
  }

  ~MpiCommunicator() override {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string backend() const override { return "mpi"; }

  void allreduce_sum(float* data, size_t count) override { wait(allreduce_sum_async(data, count), "allreduce"); }
  void allreduce_sum(double* data, size_t count) override {
    wait(post([=] { allreduce(data, count, MPI_DOUBLE); }), "allreduce");
  }
  std::shared_future<void> allreduce_sum_async(float* data, size_t count) override {
    return post([=] { allreduce(data, count, MPI_FLOAT); });
  }
  void broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= size_) throw InvalidArgument(fmt::format("broadcast from rank {} of {}", root, size_));
    wait(post([=] {
           auto* p = static_cast<char*>(data);
           for (size_t done = 0; done < bytes; done += kChunk)
             check(MPI_Bcast(p + done, static_cast<int>(std::min(kChunk, bytes - done)), MPI_BYTE, root,
                             MPI_COMM_WORLD),
                   "broadcast");
         }),
         "broadcast");
  }
  std::vector<std::string> allgather(const std::string& bytes) override {
    if (bytes.size() > static_cast<size_t>(INT_MAX))
      throw Unsupported(fmt::format("allgather of {} bytes from one rank (at most 2 GiB)", bytes.size()));
    std::vector<std::string> out(static_cast<size_t>(size_));
    wait(post([&] {
           const int mine = static_cast<int>(bytes.size());
           std::vector<int> lengths(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
           check(MPI_Allgather(&mine, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD), "allgather");
           int64_t total = 0;
           for (int r = 0; r < size_; ++r) {
             offsets[static_cast<size_t>(r)] = static_cast<int>(total);
             total += lengths[static_cast<size_t>(r)];
           }
           if (total > INT_MAX) throw Unsupported(fmt::format("allgather of {} bytes in all (at most 2 GiB)", total));
           std::string all(static_cast<size_t>(total), '\0');
           check(MPI_Allgatherv(bytes.data(), mine, MPI_BYTE, all.data(), lengths.data(), offsets.data(), MPI_BYTE,
                                MPI_COMM_WORLD),
                 "allgather");
           for (int r = 0; r < size_; ++r)
             out[static_cast<size_t>(r)] =
                 all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]), static_cast<size_t>(lengths[static_cast<size_t>(r)]));
         }),
         "allgather");
    return out;
  }
  void barrier() override {
    wait(post([] { check(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }), "barrier");
  }

  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "kiln: error: rank %d of %d: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    // Any thread may call MPI_Abort under MPI_THREAD_MULTIPLE; else leave it to the launcher,
    // which ends the job when a rank exits with an error.
    if (multiple_) MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

 private:
  template <class T>
  static void allreduce(T* data, size_t count, MPI_Datatype type) {
    for (size_t done = 0; done < count; done += kChunk)
      check(MPI_Allreduce(MPI_IN_PLACE, data + done, static_cast<int>(std::min(kChunk, count - done)), type, MPI_SUM,
                          MPI_COMM_WORLD),
            "allreduce");
  }

  std::shared_future<void> post(std::function<void()> task) {
    std::packaged_task<void()> job(std::move(task));
    std::shared_future<void> done = job.get_future().share();
    {
      const std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    wake_.notify_one();
    return done;
  }

  // Waits for a collective at most timeout() seconds; past that the other ranks are gone or stuck.
  void wait(const std::shared_future<void>& done, const char* what) {
    const auto limit = std::chrono::duration<double>(timeout());
    if (done.wait_for(limit) != std::future_status::ready)
      abort(fmt::format("a collective ({}) waited more than {} s for the other ranks (ddp_timeout): a rank died, "
                        "hung, or is running something else",
                        what, timeout()));
    done.get();
  }

  void loop(std::promise<void>& started) {
    try {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "initialization");
      multiple_ = provided >= MPI_THREAD_MULTIPLE;
      check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "error handler");
      check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "rank");
      check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "size");
      MPI_Comm local;
      check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local), "host split");
      check(MPI_Comm_rank(local, &local_rank_), "local rank");
      check(MPI_Comm_size(local, &local_size_), "local size");
      MPI_Comm_free(&local);
      started.set_value();
    } catch (...) {
      started.set_exception(std::current_exception());
      return;
    }
    for (;;) {
      std::packaged_task<void()> job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) break;  // stopping, nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();  // exceptions go to the job's future
    }
    MPI_Finalize();
  }

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stop_ = false;
  bool multiple_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace

std::shared_ptr<Communicator> make_mpi_communicator() { return std::make_shared<MpiCommunicator>(); }

#endif

}  // namespace kiln::dist
