// Multiresolution filter benchmark behind
//   `kortex bench multires [--quick|--tiny] [--json FILE] [--markdown FILE] [--peers FILE] [--only TEXT]`:
// the paper's Figs 4-6 and Table 2 (Membarth et al.; bench/PaperMultires.hpp) for the Kokkos
// implementation (gpu/multires/Multires.hpp) on the default Kokkos execution space, beside the paper's
// numbers and the CPU reference (reference_cpu/Multires.hpp) at 4 threads and at all threads:
//   Fig 4   each layer-bilateral variant on one image (512^2; sigma_d = 2, 5x5): ms, Gtaps/s,
//           GFLOP/s (stated operations per tap);
//   Fig 5   the pyramid kernels per PyramidVariant (float: Unfused / FusedDirect / FusedExpand;
//           int16: the same plus Packed16) at 512^2 and 4096^2: the level-0 expand operator of
//           decompose (l_0 = g_0 - expand(g_1)) and of reconstruct (g'_0 = l'_0 + expand(g'_1)),
//           and the whole decompose and reconstruct phases: ms, GB/s of the minimum traffic, % of
//           the measured device copy bandwidth;
//   Fig 6   every candidate tile of the layer bilateral (pipeline/MultiresTileSpace.hpp) at 1024^2:
//           best, worst, 16x16, the default and the tile gpu::multires uses (MultiresPlan::tiles());
//   Table 2 frames per second at 512^2 .. 8192^2: Kokkos end to end (MultiresPlan::run, plan built
//           once, image on the device) for the float and the 16-bit pipelines with concurrent
//           level filtering on and off, the decompose / filter / reconstruct split, and the CPU
//           reference; speedups; the targets; peers (bench/peers/multires_opencv.py).
//
// Method (every printed number except the paper's and the targets is measured in this run):
//   - input: the Shepp-Logan phantom (core/Phantom.hpp) scaled to 10 bits (0..1023), plus Gaussian
//     noise at SNR 25 (sigma_n = mean / 25), rounded to integers and clamped to 0..1023; the
//     float and the uint16 pipelines get the same values. Parameters: 5 levels, radius 2 (5x5),
//     sigma_d = 2, sigma_r = 2 sigma_n (grey levels), 10-bit integer pipeline;
//   - timing as `kortex bench ct` (bench/BenchCommon.hpp): fence before and after each run,
//     warm-up, median; inputs and outputs rotate over enough buffers to exceed twice the
//     last-level cache (the plan's own pyramid is reused across frames, as in a video pipeline);
//     a cost model learned from smaller cases skips (and says so) what does not fit the budget;
//   - every measured output is checked: single-layer bilateral outputs are finite and inside the
//     input's [min, max] (convex combination); pyramid round trips (decompose then reconstruct,
//     no filter) return the input (float: <= 1e-5 relative; integer: exactly); end-to-end outputs
//     are finite and match the CPU reference: every configuration at the smallest Table 2 size
//     (float <= 1e-5 relative, integer exactly), and the default float configuration at every
//     size where the CPU reference was timed too; Fig 6 outputs match the default tile's (the
//     tile does not change any pixel's arithmetic). The PSNR against the clean phantom is
//     reported, not checked: with 5 levels and one sigma_r for every layer, small images can come
//     out below the noisy input's PSNR.
#pragma once

#include "bench/BenchOptions.hpp"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

namespace kortex::bench {



// Runs the benchmark and writes the requested files. Every option is checked before anything
// runs: InvalidArgument for --quick with --tiny or an --only matching no case, IoError for an
// unwritable output path or an unreadable / invalid peers JSON.
BenchReport runMultiresBench(BenchOptions const& opt);

// Every case label of a mode (what --only matches), e.g. "Fig4 512^2 ClosenessLut",
// "Fig5 4096^2 int16 Packed16 decompose", "Fig6 1024^2 tile 64x1", "Table2 2048^2 kokkos float".
std::vector<std::string> multiresBenchLabels(bool tiny);

// "bench/results/multires_<device>" (device name made file-name safe).
std::string defaultMultiresResultStem();

}  // namespace kortex::bench
