// Threads that sleep between jobs (on a condition variable): the one worker pool of the host code
// (the node sums of a process group, the concurrent alignment of a cohort's pairs). OpenMP's idle
// threads spin for milliseconds after each parallel region (libgomp's default wait policy); with
// one rank per GPU on a shared host those spinning threads slowed the node sums 1.4-3x
// (bench/results/atlas_sums_nvidia-h200-x4.md).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kortex {

class WorkerPool {
 public:
  // `threads` - 1 threads beside the caller, or as many as the system gives (size() says).
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(WorkerPool const&) = delete;
  WorkerPool& operator=(WorkerPool const&) = delete;

  int size() const { return int(pool_.size()) + 1; }  // the pool's threads and the caller
  // job(t) for every t in [0, size()), t = 0 on the calling thread; returns when all have returned.
  // The job must not throw.
  void run(std::function<void(int)> const& job);

 private:
  void stop();
  void serve(int t);

  std::mutex m_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> pool_;
  std::function<void(int)> const* job_ = nullptr;
  std::uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace kortex
