// Registration job for real images (register unbiased): registerPair and its outputs.
//
// Pipeline (registerPair), every stage on the chosen back end (CPU reference or Kokkos):
//   1. intensity normalisation of both images (core/Intensity.hpp; NaN/Inf voxels and constant
//      images are refused there);
//   2. affine pre-alignment (core/Affine.hpp: NCC, multi-resolution, 12 parameters), or with
//      `affine = false` the header alignment alone (initialTransform: grids of different size or
//      orientation are resampled through their world coordinates, never refused); either way a
//      start whose overlap is below kMinOverlap is refused ("no overlap");
//   3. the normalised moving image resampled onto the fixed grid through that transform;
//   4. the nonlinear stage on the fixed grid, from u = 0: the unbiased fluid registration
//      (core/Registration.hpp; method Unbiased) or the greedy diffeomorphic registration
//      (core/Greedy.hpp; method Greedy) of that image to the normalised fixed image. The greedy
//      stage pads both images at the high end of every axis by repeating the edge voxel (the clamp
//      rule) to extents that every scale factor divides (and even at every scale for SOR), and
//      crops its field back to the fixed grid. Both store h(x) = x - u(x).
// The whole map from fixed voxel p to moving voxel is then
//   Phi(p) = A(p - u(p)),   A the affine of step 2 (fixed index -> moving index),
// and the outputs are computed through it with ONE interpolation of the original moving image:
//   warped(p)      = moving(Phi(p)) (trilinear, 0 outside the moving volume, original intensities);
//   labels(p)      = moving labels at the nearest voxel of Phi(p) (0 outside);
//   displacement   = world(Phi(p)) - world(p) in mm, LPS: the ITK/ANTs displacement-field
//                    convention (a fixed point x maps to the moving point x + d(x));
//   jacobian(p)    = det(I - grad u)(p), the fluid part (the quantity the symmetric-KL prior
//                    controls; the affine part contributes the constant factor det A).
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/Affine.hpp"
#include "core/Backend.hpp"
#include "core/Greedy.hpp"
#include "core/Image.hpp"
#include "core/Registration.hpp"

namespace kortex::pipeline {

enum class RegistrationMethod { Unbiased, Greedy };
const char* toString(RegistrationMethod m);  // "unbiased" | "greedy"

// What a registration job fits: a rigid, similarity or affine transform alone (the affine stage
// with AffineParams::dof, no deformable stage), or the affine then the deformable stage (default).
enum class RegistrationTransform { Rigid, Similarity, Affine, Deformable };
const char* toString(RegistrationTransform t);          // "rigid" | "similarity" | "affine" | "deformable"
RegistrationTransform parseRegistrationTransform(std::string const& s);  // InvalidArgument naming the choices
inline std::ostream& operator<<(std::ostream& os, RegistrationTransform t) { return os << toString(t); }

struct RegistrationPipelineOptions {
  Backend backend = Backend::Auto;
  RegistrationMethod method = RegistrationMethod::Unbiased;
  RegistrationParams fluid;          // method Unbiased
  GreedyParams greedy;               // method Greedy; with greedy.symmetric (and the deformable stage)
                                     // the affine stage fits both ways and keeps core/Affine.hpp's
                                     // affineMean of the forward fit and the reverse fit inverted
  AffineParams affine;
  // Cost-function masks on the images' grids (antsRegistration's -x): the affine stage's metric
  // (core/Affine.hpp AffineMasks) and the greedy stage's force, which is zero where the fixed mask
  // is 0 or the moving mask, carried onto the fixed grid by the affine map (nearest voxel, 0 outside
  // the moving volume) and from there by the current deformation (nearest voxel of x - u(x)), is 0.
  AffineMasks masks;
  bool useAffine = true;
  bool useFluid = true;              // false: affine only (the Dice baseline), either method
  // When set, the affine stage is skipped and this transform (fixed index -> moving index) used:
  // e.g. to run the fluid stage of two back ends on identical inputs.
  std::optional<AffineTransform> presetAffine;
  // The Kokkos greedy stage's iterations between read-backs (gpu::GreedyRegistration's speculative
  // blocks; 0: every iteration): a plan choice that changes no result.
  int greedySpeculation = 0;
  // With speculative blocks, their recording (gpu::GreedyRegistration's recorded blocks: a CUDA graph
  // per scale, launched for each later block): a plan choice that changes no result.
  bool greedyRecording = false;
  IntensityParams intensity;
  RegistrationProgress progress;     // fluid iterations (Unbiased)
  GreedyProgress greedyProgress;     // greedy iterations (Greedy)
  AffineProgress affineProgress;
};

struct RegistrationPipelineResult {
  Backend backend = Backend::Cpu;      // resolved
  std::string executionSpace;
  AffineTransform affine;              // fixed index -> moving index
  AffineResult affineResult;           // when the affine stage ran
  bool affineRan = false;
  RegistrationMethod method = RegistrationMethod::Unbiased;
  RegistrationResult fluid;            // method Unbiased
  GreedyResult greedy;                 // method Greedy
  Geometry greedyGrid;                 // the padded grid of the greedy stage
  VectorField<Kokkos::HostSpace> u;    // fixed grid, voxels
  HostImage fixedNormalised, movingResampled;  // the fluid stage's inputs
  Geometry fixedGrid, movingGrid;
  double overlapStart = 0.0;
  // Wall seconds per stage (host clock, device fenced).
  double secondsNormalise = 0, secondsAffine = 0, secondsResample = 0, secondsFluid = 0, secondsTotal = 0;
};

// Throws InvalidArgument for non-3D input, NaN voxels, constant images, no overlap, invalid
// parameters (one message each).
RegistrationPipelineResult registerPair(HostImage const& moving, HostImage const& fixed,
                                        RegistrationPipelineOptions const& opt);

// The alignment stages alone (1-3: normalisation, header + affine alignment, the moving image
// resampled onto the fixed grid; u zero), for a job that validated opt.affine and opt.intensity at
// its entry (the atlas aligns each subject to its reference): opt's method and fluid / greedy
// parameters are not read, nothing is validated again.
RegistrationPipelineResult alignPair(HostImage const& moving, HostImage const& fixed, RegistrationPipelineOptions const& opt);

inline constexpr int kMaxConcurrentPairs = 32;
// Pair i's stages against the fixed image of runPairs, on the worker's instance (the fixed image
// normalised once); throws as registerPair does.
using PairRun = std::function<RegistrationPipelineResult(HostImage const& moving)>;
// The engine of alignPairs and the register cohort (pipeline/RegisterCohort.hpp): work(i, run) for
// every i in [0, n), where `run` is stages 1-4 of a pair (1-3 unless `fluid`). Where the Kokkos back
// end runs independent instances concurrently (kx::hasConcurrentInstances: Kokkos 4 on a device) up
// to min(maxConcurrent, kMaxConcurrentPairs) pairs run at once, each on its own instance and host
// thread; elsewhere one after another on the calling thread. `work` must not throw (it keeps its
// results and failures). `ready(i)` runs on the calling thread in index order once pair i's work
// returned; returning false starts no new pair (those running finish). The parameters are the
// caller's to validate (validatePairOptions). Returns how many pairs' work ran.
int runPairs(int n, HostImage const& fixed, RegistrationPipelineOptions const& opt, bool fluid, int maxConcurrent,
             std::function<void(int, PairRun const&)> const& work, std::function<bool(int)> const& ready);
// registerPair keeps the Kokkos greedy stage's workspace (device images, fields, FFT plans) from one
// call to the next, for the next pair on the same grid with the same parameters; this frees it (a job
// that plans its device memory from what is free calls it first; Kokkos::finalize does too).
void releaseRegisterPairWorkspace();
// registerPair's parameter checks for a pair on the `fixed` grid (InvalidArgument): a job's entry check.
void validatePairOptions(Geometry const& fixed, RegistrationPipelineOptions const& opt);
// Device bytes one greedy pair's Kokkos stages hold in the deformable stage (the aligned images, the
// padded inputs and output field, every scale's images, fields and stepper): what a cohort plans
// its concurrent pairs with.
std::int64_t greedyPairDeviceBytes(Geometry const& fixed, Geometry const& moving, GreedyParams const& params);

// alignPair of every moving image against one fixed image (runPairs), which is normalised once.
// Each result is alignPair's for that pair. `done(i)` runs on the calling thread as pair i is ready,
// in index order; the first pair (by index) that fails throws, its message prefixed with labels[i].
std::vector<RegistrationPipelineResult> alignPairs(std::vector<HostImage const*> const& moving, HostImage const& fixed,
                                                   RegistrationPipelineOptions const& opt,
                                                   std::vector<std::string> const& labels,
                                                   std::function<void(int)> const& done = {});

// The extents the greedy stage pads a grid to (see above).
Geometry greedyPaddedGrid(Geometry const& fixed, GreedyParams const& params);

// Phi(p) at a fixed voxel (moving index coordinates).
std::array<double, 3> mapPoint(RegistrationPipelineResult const& r, Index x, Index y, Index z);
// Phi at a non-grid fixed point (u interpolated trilinearly, clamp rule).
std::array<double, 3> mapPoint(RegistrationPipelineResult const& r, std::array<double, 3> const& p);

HostImage warpedMoving(RegistrationPipelineResult const& r, HostImage const& movingOriginal);
HostImage warpedLabels(RegistrationPipelineResult const& r, HostImage const& movingLabels);
// Dice 2 |A n B| / (|A| + |B|) of every label present (non-zero) in `fixedLabels`, A its voxels there
// and B its voxels in `warpedMovingLabels` (same grid; labels rounded to integers), and the mean over
// those labels: what the validation studies and the QC report call the mean label Dice.
struct LabelDice {
  double mean = 0.0;
  int labels = 0;
};
LabelDice meanLabelDice(HostImage const& fixedLabels, HostImage const& warpedMovingLabels);
// Head mask on the fixed grid: fixedNormalised > threshold (normalised intensities in [0, 1]); where
// the reports and the validation measure maps "inside the head".
HostImage headMask(RegistrationPipelineResult const& r, double threshold = 0.1);
// The ITK/ANTs displacement field (world mm, LPS) on the fixed grid, 3 components.
VectorField<Kokkos::HostSpace> worldDisplacement(RegistrationPipelineResult const& r);
HostImage jacobianMap(RegistrationPipelineResult const& r);

nlohmann::json toJson(RegistrationPipelineResult const& r);

}  // namespace kortex::pipeline
