// Unbiased atlas benchmark behind
//   `kortex bench atlas [--quick|--tiny] [--json FILE] [--markdown FILE] [--peers FILE] [--only TEXT]
//                       [--data DIR]`:
// the atlas tables of Ha et al. 2010 for the Kokkos atlas (gpu/atlas) on the default execution
// space, one process:
//   Iteration  one atlas iteration over the large cohort (315 subjects at 144x192x160 on a GPU)
//              per solver (fft, hybrid-sor, hybrid-cg), its time per subject, the memory traffic
//              against the measured copy bandwidth, beside the batched PyTorch iteration of
//              bench/peers/atlas_torch.py (--peers); target <= 0.1 s per iteration;
//   Whole      the whole multi-scale atlas (25 + 50 iterations) of that cohort (target <= 8 s,
//              images already on the host), and Fig 13: 20 subjects, single scale 200 iterations
//              vs multi-scale 25 + 50 (the paper: 3.5x);
//   CPU        the CPU reference's iteration at 1 thread and at all threads (per subject).
// Cohorts: with --data, the 40 IXI T1 volumes (mri/ixi_2mm + ixi_2mm_more/t1, label maps skipped) normalised and
// resampled to the grid, subject i = image (i mod 40) under a seeded random smooth diffeomorphic
// displacement (core/Phantom.hpp smoothDisplacement, max 3 voxels, seed 1000 + i); without it,
// the structured phantom under the same displacements. Timing: fenced; per-iteration times are
// the differences of the run's iteration clock, median over the iterations after the first.
#pragma once

#include "bench/BenchOptions.hpp"

namespace kortex::bench {

BenchReport runAtlasBench(BenchOptions const& opt);

}  // namespace kortex::bench
