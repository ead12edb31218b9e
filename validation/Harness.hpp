// Validation harness: for one case (algorithm + parameters + input image) it runs the CPU
// reference (reference_cpu/, Eigen + OpenMP) and every Kokkos variant on every enabled Kokkos
// execution space (Serial / OpenMP / Threads / Cuda, from the KOKKOS_ENABLE_* macros), and
// reports per variant:
//   - max-abs error, max relative error (max|a-b| / max|ref|), RMSE and PSNR (data range =
//     max - min of the reference output) against the reference;
//   - the median time of several runs (warm-up first, fence before and after each run,
//     core/Timing.hpp) of the kernel alone, data already resident in the space's memory;
//   - the host<->device transfer time (upload + download of one image, medians) separately,
//     for spaces whose memory is not host memory;
//   - the speedup against the reference (reference median / variant median), the reference
//     running with the stated number of OpenMP threads;
//   - pass/fail against the named tolerance kMaxRelativeErrorTolerance.
// Results render as Markdown (one table row per variant) and JSON (nlohmann_json).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/Bilateral.hpp"
#include "core/Image.hpp"
#include "core/Multires.hpp"
#include "core/Nlm.hpp"
#include "core/Registration.hpp"
#include "core/SurfaceNlm.hpp"
#include "core/Timing.hpp"
#include "validation/Metrics.hpp"

namespace kortex::validation {

// Tolerance on the max relative error (max|kokkos - reference| / max|reference|) of every
// Kokkos variant. Why 1e-5: the Kokkos kernels accumulate in float32 while the reference
// accumulates in double. A normalised weighted sum of n <= 17^3 = 4913 taps in float32 has a
// relative rounding error of about sqrt(n) * 2^-24 ~ 4e-6 in the worst case we run, and
// float exp() of arguments of O(10) adds a few 1e-7; 1e-5 (~84 ulp of 1.0) keeps a 2x margin
// over that, while any real defect (a wrong tap, boundary rule, weight or normaliser) moves
// the output by >= 1e-3 of the range and fails by two orders of magnitude.
inline constexpr double kMaxRelativeErrorTolerance = 1e-5;

// Multires: the float pipeline, variants = pyramid (Unfused, FusedDirect, FusedExpand) x layer
// bilateral (Naive, ClosenessLut, FastMath, Reuse), tolerance as above. MultiresInteger: the 16-bit
// integer pipeline (input rounded to uint16, output compared as float), variants = pyramid
// (Unfused, FusedDirect, FusedExpand, Packed16) x ClosenessSimilarityLut; it must be exact
// (tolerance 0), and its Kokkos timings include the uint16 buffers being filled by a copy kernel
// only once per space (not per run). SurfaceNlm: the level-set NLM surface denoising of a signed
// distance (3D), variants = the search (Global, RandomAccess, ScratchBroadcast, Pruned, PrunedBlocks);
// both back ends form the weights and iterations in double from the same exact neighbour sets and
// round phi to float once, so the tolerance above holds with room. RegistrationForce: the unbiased
// fluid registration's force f = -dE/du (data + lambda regulariser) of `input` (the moving image)
// against `fixed` at the displacement `displacement`, variants = the force kernels (Naive, Recompute,
// Reuse, TwoPass); its three components are compared as one image of 3 nz slices, tolerance as above
// (float stresses, logs and samples against the double reference: tstRegistration measured <= 9e-7).
enum class Algorithm { Bilateral, Nlm, Multires, MultiresInteger, SurfaceNlm, RegistrationForce };
const char* toString(Algorithm a);

// One validation case.
struct Case {
  std::string name;            // e.g. "bilateral 2D shepp-logan 97x83 r=3"
  Algorithm algorithm = Algorithm::Bilateral;
  BilateralParams bilateral;   // used when algorithm == Bilateral (variant field ignored)
  NlmParams nlm;               // used when algorithm == Nlm (variant field ignored)
  MultiresParams multires;     // used by Multires / MultiresInteger (variant fields ignored)
  SurfaceNlmParams surface;    // used when algorithm == SurfaceNlm (variant field ignored)
  RegistrationParams registration;  // RegistrationForce: lambda (variant field ignored)
  HostImage fixed;                  // RegistrationForce: the fixed image, on input's grid
  VectorField<Kokkos::HostSpace> displacement;  // RegistrationForce: u (3, nz, ny, nx) on input's grid
  HostImage input;
  std::string inputDescription;  // "Shepp-Logan 2D + noise (SNR 25)"
};

struct HarnessOptions {
  // Every implementation first runs once, fenced and timed (that run produces the output that
  // is checked and counts as the first warm-up run); then warmup - 1 more warm-up runs and up to
  // `repetitions` timed runs, fewer (at least 1) when the first run shows that `repetitions`
  // runs would exceed timeBudgetMs. When not even one more run fits, the first run is reported
  // as the only sample (warm-up 0). The JSON records the warm-up and repetitions actually used.
  int warmup = 1;
  int repetitions = 5;
  double timeBudgetMs = 2000.0;
  bool time = true;             // false: one run each, no timing (correctness only)
  int referenceThreads = 0;     // OpenMP threads of the reference; 0 = omp_get_max_threads()
  double maxRelativeErrorTolerance = kMaxRelativeErrorTolerance;
};

// Comparison of one output against the reference, with the verdict.
struct Check {
  ErrorStats errors;
  bool pass = false;
  std::string message;  // why it failed (empty on pass)
};

// The comparison function every variant goes through (exposed so tests can feed it a
// deliberately wrong output). Fails on extents mismatch, non-finite voxels or
// maxRel > tolerance.
Check checkAgainstReference(HostImage const& output, HostImage const& reference,
                            double maxRelativeErrorTolerance = kMaxRelativeErrorTolerance);

struct VariantResult {
  std::string space;    // Kokkos execution space name ("Serial", "OpenMP", "Cuda")
  std::string variant;  // "Naive", "ScratchTiled", "BoxSum"
  int concurrency = 1;  // the space's concurrency
  Check check;
  TimingStats timing;   // kernel only (empty when not timed)
  bool timed = false;
  double speedup = 0.0; // reference median / variant median
  // Host<->device transfer of one image (medians): upload, download. Negative when the
  // space's memory is host memory (no transfer needed).
  double uploadMs = -1.0;
  double downloadMs = -1.0;
  bool ran = false;     // false when the variant threw (message in check.message)
};

struct CaseResult {
  std::string name;
  Algorithm algorithm = Algorithm::Bilateral;
  std::string params;         // "r=3 sigma_s=1.5 sigma_r=0.02"
  std::string inputDescription;
  Geometry geometry;
  TimingStats reference;
  bool referenceTimed = false;
  int referenceThreads = 1;
  std::vector<VariantResult> variants;
  double tolerance = kMaxRelativeErrorTolerance;
  bool pass = false;          // every variant ran and passed
  double wallMs = 0.0;        // wall time of runCase (all runs, copies and checks)
};

CaseResult runCase(Case const& c, HarnessOptions const& opt = {});

// Names of the enabled Kokkos execution spaces, in the order the harness runs them.
std::vector<std::string> enabledExecutionSpaces();
// Number of variants of an algorithm (2 for bilateral, 3 for NLM, 16 / 5 for multires float /
// integer, 5 for surface NLM).
int variantCount(Algorithm a);
// The parameters of variant v of a multires case (pyramid and bilateral fields set).
MultiresParams multiresVariantParams(Algorithm a, MultiresParams p, int v);

std::string describeParams(BilateralParams const& p);
std::string describeParams(NlmParams const& p);
std::string describeParams(MultiresParams const& p);
std::string describeParams(SurfaceNlmParams const& p);

nlohmann::json toJson(CaseResult const& r);
nlohmann::json toJson(ErrorStats const& e);
nlohmann::json toJson(TimingStats const& t);
// Markdown table of many cases (one row per variant; header included).
std::string toMarkdown(std::vector<CaseResult> const& results);

}  // namespace kortex::validation
