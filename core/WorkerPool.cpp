#include "core/WorkerPool.hpp"

#include <system_error>

namespace kortex {

WorkerPool::WorkerPool(int threads) {
  for (int t = 1; t < threads; ++t) {
    try {
      pool_.emplace_back([this, t] { serve(t); });
    } catch (std::system_error const&) {
      break;  // the system gives no more threads: those started share the work
    }
  }
}

WorkerPool::~WorkerPool() { stop(); }

void WorkerPool::run(std::function<void(int)> const& job) {
  {
    std::lock_guard<std::mutex> lock(m_);
    job_ = &job;
    pending_ = int(pool_.size());
    ++generation_;
  }
  wake_.notify_all();
  job(0);
  std::unique_lock<std::mutex> lock(m_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void WorkerPool::stop() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : pool_) t.join();
  pool_.clear();
}

void WorkerPool::serve(int t) {
  std::uint64_t seen = 0;
  for (;;) {
    std::function<void(int)> const* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(m_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(t);
    std::lock_guard<std::mutex> lock(m_);
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace kortex
