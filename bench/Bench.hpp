// CT benchmark behind `kortex bench ct [--quick|--tiny] [--json FILE] [--markdown FILE]`:
// the paper's Table I (bilateral) and Table II (NLM, patch 7x7) at 256^2 / 512^2 / 1024^2 with
// windows 7 / 11 / 17, and the same windows in 3D at 64^3 / 128^3 / 256^3 (NLM 3D with patch
// 5^3 and 7^3), for every Kokkos variant (Naive, ScratchTiled, and BoxSum for NLM) on the
// default Kokkos execution space, beside the paper's straightforward / optimized numbers and
// the ratios paper / ours; the CPU reference (Eigen + OpenMP) at 1 thread and at all threads;
// host <-> device transfer times; throughput; the targets; and, when given a JSON from
// bench/peers/run_peers.py, the peers (OpenCV, scikit-image, PyTorch) side by side.
//
// Method (every printed number except the paper's and the targets is measured in this run):
//   - input: the Shepp-Logan phantom (core/Phantom.hpp) + Gaussian noise at SNR 25, with the
//     parameters of the quality study (validation/Quality.hpp: BF sigma_s = r/2,
//     sigma_r = 2 sigma_n; NLM h = sigma_n);
//   - device: data resident on the device, kernel time only: exec.fence() before and after each
//     run, warm-up first, median of the repetitions (core/Timing.hpp); successive runs rotate
//     over enough input/output buffer pairs to exceed twice the last-level cache (GPU L2 from
//     the device; 32 MiB assumed for host spaces), so small images do not just measure cache;
//   - every measured implementation's output is checked once after timing: finite and inside
//     [min(input), max(input)] (both filters are convex combinations of input voxels);
//   - costs are estimated from the measured rate of the same implementation on a smaller case
//     (or a small probe run), and a case whose estimate exceeds the mode's budget is reported
//     as "skipped (est. N s)" - never filled in - or run once with no repetition when it fits
//     the single-run budget (marked "1 run");
//   - throughput: GB/s = (input + output bytes) / time, the minimum traffic; Gtaps/s = voxels x
//     window taps (bilateral) or voxels x search offsets (NLM: one weight, one exp each) / time.
#pragma once

#include <string>

#include "bench/BenchOptions.hpp"

namespace kortex::bench {

// Runs the benchmark and writes the requested files (checked for writability before running).
// Throws IoError for an unwritable output path or unreadable peers JSON.
BenchReport runCtBench(BenchOptions const& opt);

// "bench/results/ct_<device>" (device name made file-name safe): the stem under which GPU
// results are committed (add ".json" / ".md").
std::string defaultResultStem();

}  // namespace kortex::bench
