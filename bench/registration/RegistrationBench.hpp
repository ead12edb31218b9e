// Internal pieces of `kortex bench register` (bench/BenchRegistration.hpp says what is measured and
// how): the inputs (Volume.cpp: the phantom pair and its device copy), the Context of one run
// (options, report, JSON, the one Markdown stream every section writes to in order, the sizes and
// repetitions) and the sections, one translation unit each:
//   Force.cpp      Fig 1 and Table 1: the force kernels vs volume size, per tile, with resources;
//   Iteration.cpp  Fig 2a/2b: one iteration's kernel sequence and its split, the whole run, the CPU
//                  reference at 1 and all threads, the PyTorch peer;
//   Targets.cpp    the 240^3 iteration and the IXI pair end to end (--data).
// bench/BenchRegistration.cpp checks the options, writes the header and runs the sections in order.
#pragma once

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "bench/BenchCommon.hpp"
#include "bench/BenchOptions.hpp"
#include "core/Image.hpp"
#include "core/Registration.hpp"
#include "gpu/registration/Registration.hpp"
#include "gpu/registration/detail/Force.hpp"

namespace kortex::bench::registration {

using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;
namespace ri = gpu::registration_detail;

// The paper's flop count of the force kernel per voxel (Lee et al., Sec. 3.2).
inline constexpr double kPaperFlopsPerVoxel = 158.0;
// Minimum traffic of one accepted iteration per voxel, float32: force reads u (12 B), T and R
// (8 B) and writes f (12 B) = 32; smoothing, 3 passes over 3 components, read + write = 72; rate
// reads u, v and writes the rate = 36; update reads u, rate and writes u' = 36. Total 176.
inline constexpr double kForceBytesPerVoxel = 32.0;
inline constexpr double kIterationBytesPerVoxel = 176.0;
// The targets.
inline constexpr double kTargetIterationMs240 = 3.0;
inline constexpr double kTargetIxiPairS = 1.0;
inline constexpr double kLambda = RegistrationParams{}.lambda;  // the library / CLI defaults
inline constexpr float kSigma = RegistrationParams{}.sigma;

// ---- inputs (Volume.cpp) ----------------------------------------------------------------------
struct Volume {
  HostImage fixed, moving;
  VectorField<Kokkos::HostSpace> uMid;  // half of the true displacement: a mid-registration field
};

// fixed = the 3D Shepp-Logan phantom at n^3, moving = fixed under a smooth 3-voxel displacement.
Volume makeVolume(Index n);

struct DeviceVolume {
  ImageView<Mem> moving, fixed;
  ri::SampleImage<Mem> samples;  // moving with its gradient, built once as a registration does
  gpu::Field<Mem> u, f, v, tmp, u2;
  gpu::Field<Mem> stress;  // the TwoPass force's stress field, allocated by forceViews when first needed
  ri::Extents e;
};

// d.stress allocated (9 components) when `v` is TwoPass; the views of d's force.
ri::ForceViews<Mem> forceViews(DeviceVolume& d, RegistrationVariant v);

DeviceVolume upload(Volume const& h);

// ---- one run ----------------------------------------------------------------------------------
struct Context : common::SectionRun {
  Context(BenchOptions const& o, BenchReport& r, nlohmann::json p);

  Exec exec;
  bool onDevice = false;
  std::vector<Index> forceSizes, iterSizes;  // Fig 1, Fig 2
  int reps = 0, warm = 0;
  double copyGBs = 0.0;
  nlohmann::json j;

};

// The sections, in report order.
void runForce(Context& ctx);      // Fig 1 and Table 1
// Fig 2a/2b; returns the median of the 240^3 kernel sequence (NaN when not measured).
double runIteration(Context& ctx);
void runTargets(Context& ctx, double seq240);

}  // namespace kortex::bench::registration
