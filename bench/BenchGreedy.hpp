// Greedy diffeomorphic registration benchmark behind
//   `kortex bench greedy [--quick|--tiny] [--json FILE] [--markdown FILE] [--peers FILE]
//                        [--only TEXT] [--data DIR]`:
// the tables of Ha et al. 2010 for the Kokkos implementation (gpu/fluid, gpu/greedy, gpu/imageops,
// gpu/gaussian) on the default execution space:
//   Matvec     Helmholtz matvec GFLOP/s, implicit (matrix-free stencil) and explicit (CSR), 64^3 ..
//              256^3, counted as 2 flops per stored non-zero (7 per row at beta = 0) for both, and
//              GB/s of the implicit one (its minimum traffic: read v, write L v = 24 B per voxel);
//   Solvers    at the target grid, the right-hand side of a real step: the spectral solve; SOR
//              (Naive, ScratchTiled) and CG (Implicit, Explicit) cold (from 0) and warm (from the
//              previous step's solution): iterations to the spectral solve's accuracy class
//              (relative residual <= 1e-3 and <= 1e-5), the residual reached, time;
//   Iteration  one greedy iteration at 144x192x160 (force, solve, step size, composition, fold
//              check, warp: GreedyRegistration::run per iteration, fft and hybrid-sor), beside the
//              PyTorch step of bench/peers/greedy_torch.py (--peers), and the memory traffic of its
//              kernels against the measured copy bandwidth;
//   Kernels    gradient (Naive vs ScratchTiled), 3D Gaussian (separable, recursive, spectral),
//              n-ary fused vs binary element-wise operators, with GB/s;
//   Lncc       the LNCC force at an IXI pair's full scale and the target grid, radius 2 and 4, per
//              variant (Separable, ScratchTiled, Reuse, Recompute), checked bit for bit against Separable;
//   IXI        (--data) an IXI pair end to end with affine and 2 scales (target <= 0.3 s), and
//              multi-scale (25 + 50) vs single scale (200 iterations): label Dice and time;
//   Pair       (--data) two IXI pairs end to end with the defaults, LNCC and SSD: stage medians
//              against issue 40's goals (<= 0.05 s and <= 0.03 s);
//   Cohort     (--data) >= 100 registrations to one fixed image by the cohort job, one pair at a
//              time and with the planned concurrent pairs: pairs per second (goal >= 50).
// Timing: fence before and after, warm-up, median (core/Timing.hpp).
#pragma once

#include "bench/BenchOptions.hpp"

namespace kortex::bench {

BenchReport runGreedyBench(BenchOptions const& opt);

}  // namespace kortex::bench
