// Surface NLM benchmark behind
//   `kortex bench surface [--quick|--tiny] [--json FILE] [--markdown FILE] [--peers FILE]
//                         [--dump DIR] [--only TEXT]`:
// the surface part of Lee et al. for the Kokkos implementation (gpu/surface_nlm/SurfaceNlm.hpp) on the
// default execution space, beside the CPU reference (reference_cpu/SurfaceNlm.hpp):
//   Fig 4   time vs band size (17.5k .. 175k elements) for each search variant (the paper's
//           brute-force Global, RandomAccess, ScratchBroadcast, and Pruned): whole run (search +
//           weights + K iterations) and its split, certificate failures (elements searched again
//           exactly), distances computed;
//   Fig 5   speedup against the CPU reference at 2 threads (the paper's dual-thread CPU) and at
//           all threads, where the CPU run fits the budget (never extrapolated), and the
//           paper's bandwidth measure: candidate patch bytes read by all threads per second of
//           search (distances computed x n^3 x 4 B / t), plus GFLOP/s (3 flops per patch voxel pair);
//   Check   at every size where the CPU ran: neighbour sets (identical ties aside) and max
//           |dphi| over the band against the CPU (paper bound 1/4 voxel);
//   Target  weights (search + re-rank + weights) for N = 175,000, m = 96, exact, <= 0.5 s;
//   Peer    PyTorch brute-force kNN (chunked matmul + topk, bench/peers/surface_torch.py) on the
//           records `--dump` writes (largest size), with its neighbour-set agreement.
// Inputs: a sphere's exact signed distance plus Gaussian noise (sd 0.3 voxel) on phi, the radius
// chosen for each target band size (the actual N is reported). Parameters: library defaults
// (band 3, patch 5, m 96, c1 400, c2 16, 10 iterations). Timing: fence before and after,
// warm-up, median (core/Timing.hpp).
#pragma once

#include "bench/BenchOptions.hpp"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

namespace kortex::bench {



BenchReport runSurfaceBench(BenchOptions const& opt);

}  // namespace kortex::bench
