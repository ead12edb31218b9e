// Timing helpers: host clock intervals, and the fenced median timing used by the validation
// harness and the benchmarks (warm up, fence before and after every repetition, the median).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace kortex {

using Clock = std::chrono::steady_clock;

// Seconds / milliseconds of host time since t0 (fence device work before reading them).
inline double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
inline double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ceil(a / b) for a >= 0, b > 0 (tile and league counts).
constexpr int ceilDiv(int a, int b) { return (a + b - 1) / b; }

struct TimingStats {
  double medianMs = 0.0;
  double minMs = 0.0;
  double maxMs = 0.0;
  int warmup = 0;
  int repetitions = 0;
  std::vector<double> samplesMs;
};

// `run()` launches the work, `fence()` waits for it (exec.fence() for Kokkos, no-op on host).
template <class Run, class Fence>
TimingStats timeMedian(Run&& run, Fence&& fence, int warmup, int repetitions) {
  TimingStats s;
  s.warmup = warmup;
  s.repetitions = std::max(1, repetitions);
  for (int i = 0; i < warmup; ++i) run();
  fence();
  s.samplesMs.reserve(s.repetitions);
  for (int i = 0; i < s.repetitions; ++i) {
    fence();
    const auto t0 = std::chrono::steady_clock::now();
    run();
    fence();
    const auto t1 = std::chrono::steady_clock::now();
    s.samplesMs.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::vector<double> sorted = s.samplesMs;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  s.medianMs = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  s.minMs = sorted.front();
  s.maxMs = sorted.back();
  return s;
}

}  // namespace kortex
