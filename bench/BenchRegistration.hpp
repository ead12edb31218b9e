// Registration benchmark behind
//   `kortex bench register [--quick|--tiny] [--json FILE] [--markdown FILE] [--peers FILE]
//                          [--only TEXT] [--data DIR]`:
// the registration part of Lee et al. (Table 1, Fig 1, Fig 2a, Fig 2b) for the Kokkos
// implementation (gpu/registration/Registration.hpp) on the default Kokkos execution space, beside the CPU
// reference (reference_cpu/Registration.hpp) at 1 thread and at all threads:
//   Table 1  per force variant and explored team tile: registers, static and dynamic shared memory
//            (team scratch), local memory (spills/stack) per thread, team shape, teams per SM from
//            the occupancy model of core/Occupancy.hpp and from the CUDA occupancy API (CUDA
//            builds; host builds report the tile and scratch only), and the force time at the
//            largest size;
//   Fig 1    force-kernel time vs volume size (64^3 .. 256^3) per variant (default tile), and per
//            tile (so per teams/SM) at the largest size;
//   Fig 2a   time per iteration of the whole registration (FluidRegistration::run, 128^3 .. 256^3,
//            a fixed number of iterations, no early stop) and the CPU reference's at 1 thread and
//            all threads (fewer iterations where slow), speedups; and one accepted iteration's
//            kernel sequence (force + smoothing + rate + update), the 240^3 target;
//   Fig 2b   GFLOP/s of the force kernel with the paper's 158 flops per voxel, and GB/s of one
//            iteration's minimum traffic (176 B per voxel, bench/registration/RegistrationBench.hpp) against
//            the measured device copy bandwidth;
//   Targets  240^3 iteration <= 3 ms; an IXI pair (120x120x90, `--data`) end to end <= 1 s
//            (pipeline/Register.hpp registerPair: normalisation, affine, fluid).
// Inputs: fixed = the 3D Shepp-Logan phantom (core/Phantom.hpp) at n^3; moving = fixed warped by
// smoothDisplacement(3 voxels) (core/Phantom.hpp). lambda and sigma: the library / CLI defaults.
// Timing: fence before and after, warm-up, median (core/Timing.hpp). Every timed force output is
// checked finite with finite energy; the whole-registration runs must lower the energy.
#pragma once

#include "bench/BenchOptions.hpp"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

namespace kortex::bench {



BenchReport runRegistrationBench(BenchOptions const& opt);

}  // namespace kortex::bench
