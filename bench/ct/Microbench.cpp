// Device peak the CT benchmark compares its Gtaps/s with: the float exp() rate (the copy
// bandwidth, the peak for GB/s, is common::measureCopyBandwidth).
#include "bench/ct/CtBench.hpp"
#include "core/Compat.hpp"

namespace kortex::bench::ct {

// Microbenchmark of the device's exp() throughput, the operation both filters are built on
// (one range weight per bilateral tap, one weight per NLM search offset): every thread runs
// kExpChain dependent float exp() evaluations (the same kx::exp as the filters), enough threads
// to fill the device; the result is written so nothing is optimised away.
struct ExpRateFunctor {
  static constexpr int kExpChain = 64;
  Kokkos::View<float*, DeviceMem> out;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    // Four independent chains so the rate is throughput-, not latency-bound on a CPU core.
    float x0 = 0.0009765625f * static_cast<float>(i & 1023), x1 = x0 + 0.25f, x2 = x0 + 0.5f,
          x3 = x0 + 0.75f;
    for (int k = 0; k < kExpChain / 4; ++k) {
      x0 = kx::exp(-x0);  // each stays in (0.1, 1]: no under/overflow
      x1 = kx::exp(-x1);
      x2 = kx::exp(-x2);
      x3 = kx::exp(-x3);
    }
    out(i) = x0 + x1 + x2 + x3;
  }
};

double measureExpRate(DeviceExec const& exec, bool tiny) {
  const int n = common::kDeviceIsHostMemory ? (1 << (tiny ? 16 : 20)) : (1 << 24);
  ExpRateFunctor f{Kokkos::View<float*, DeviceMem>("kortex::bench::exp_rate", n)};
  auto t = timeMedian(
      [&] {
        Kokkos::parallel_for("kortex::bench::expRate", Kokkos::RangePolicy<DeviceExec>(exec, 0, n), f);
      },
      [&] { exec.fence(); }, 1, tiny ? 2 : 5);
  return static_cast<double>(n) * ExpRateFunctor::kExpChain / (t.medianMs * 1e6);  // G exp / s
}

}  // namespace kortex::bench::ct
