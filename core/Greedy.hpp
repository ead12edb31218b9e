// Greedy iterative diffeomorphic registration (Ha et al. 2010, Algorithm 2, after Christensen et
// al. 1996), multi-scale (Algorithm 4): the specification every back end implements, the
// parameters, and the per-voxel maths shared by every Kokkos variant. The fluid operator L and
// its solvers are specified in core/Fluid.hpp. The CPU reference (reference_cpu/Greedy.cpp)
// implements this text independently.
//
// ---- Conventions (the same as core/Registration.hpp, so that the registration job's outputs serve
// both) --------------------------------------------------------------------------------------------
// I0 (moving) and I1 (fixed) are 3D scalar images on the same grid. The deformation is stored as a
// displacement u (VectorField, 3 components, x first, voxel units): h(x) = x - u(x), and the
// deformed moving image is I0(t)(x) = I0(h(x)) = I0(x - u(x)) (trilinear, clamp-extended; the
// registration module's warp). Dh = I - grad u with the clamped central differences of
// core/Registration.hpp; "det Dh > 0 everywhere" is checked after every step.
//
// ---- One iteration (every back end, at the current scale) ---------------------------------------
//   1. force      F(x) = -( W(x) - I1(x) ) grad W(x),   W = I0(t) = I0(x - u(x)),
//                 grad by clamped central differences: (D_j W)(i) = (W(c(i+1)) - W(c(i-1))) / 2.
//                 (-F is the gradient of E = 1/2 sum (W - I1)^2 with respect to a displacement of
//                 the sample points, so v = L^-1 F is a descent direction: L is SPD.)
//   2. solve      L v = F (core/Fluid.hpp; the solver rule below).
//   3. step       m = max_x |v(x)| (Euclidean). m == 0: stop (ZeroVelocity).
//                 delta = maxStep (voxels of the current scale), eps = delta / m, so that no point
//                 moves more than maxStep voxels (the paper: 1 voxel).
//   4. compose    h <- h(x + eps v(x)), i.e.  u'(x) = u(x + eps v(x)) - eps v(x),
//                 u sampled trilinearly with the clamp rule (reverse mapping).
//   5. fold check min det(I - grad u') > 0. Otherwise the step is refused: delta halves and step 4
//                 is redone from the same v; delta < minStep: stop (Folded), keeping the last u
//                 (which has det > 0 everywhere).
//   6. warp       W = I0(x - u'(x)) from the original I0 (no accumulation of resampling).
// The RMSE sqrt(mean (W - I1)^2) after the step is recorded per iteration, whatever the metric.
//
// ---- Metrics (GreedyMetric; the force of step 1) ------------------------------------------------
// Ssd  - the force above: the mismatch is 1/2 sum (W - I1)^2.
// Lncc - local normalised cross-correlation over the (2R+1)^3 box window Omega(x) centred at x, R =
//        lnccRadius voxels of the current scale at every scale (the window covers f (2R+1) full-grid
//        voxels at factor f), window indices clamped (core/Boundary.hpp), N = (2R+1)^3 samples:
//          sW, sF, sWW, sFF, sWF = the window sums of W, F = I1, W^2, F^2, W F;  mW = sW/N, mF = sF/N;
//          A = sum (W - mW)(F - mF) = sWF - sW sF / N,  B = sum (W - mW)^2 = sWW - sW^2 / N,
//          C = sum (F - mF)^2 = sFF - sF^2 / N;   with B' = B + e, C' = C + e, e = N kLnccNoiseVariance:
//          cc(x) = A^2 / (B' C'),   E = sum_x cc(x) (maximised; the mismatch is -E). The noise floor
//          e keeps cc and its gradient bounded and continuous in near-flat windows (background):
//          without it (a window counted as flat below a threshold, its terms 0) the ratio A / (B C)
//          of near-flat windows turned rounding into force, and CPU and Kokkos runs of one IXI pair
//          at 4 mm grew apart ~1.3x per iteration (1e-4 mm after 5 iterations, 2.3 mm after 50).
//        d cc(x) / d W(y) = a(x) [ (F(y) - mF(x)) - b(x) (W(y) - mW(x)) ]  for every sample y of
//          Omega(x), a = 2A/(B'C'), b = A/B' (dA/dW(y) = F(y) - mF, dB/dW(y) = 2 (W(y) - mW): the
//          mean terms sum to zero over the window). This is the term of Avants et al. 2008; ANTs
//          keeps only the window centred at y, Kortex sums every window that samples y, so that
//          the force is the exact gradient of E (tstLncc checks it against a finite difference):
//            G(y) = sum_x K(x, y) a(x) [ (F(y) - mF(x)) - b(x) (W(y) - mW(x)) ]
//                 = F(y) S[a](y) - S[a mF](y) - W(y) S[a b](y) + S[a b mW](y),
//          with S[c](y) = sum_x K(x, y) c(x), K(x, y) the number of window offsets o with
//          clamp(x + o) = y: the transpose of the clamped box sum, separable, per axis 1 for
//          |x - y| <= R inside the grid and R + 1 - |x - y| on the first and last planes
//          (lnccTransposeWeight).
//        F(y) = G(y) grad W(y) (the same clamped central differences): as for SSD, -F is the
//          gradient of the mismatch -E with respect to a displacement of the sample points.
//        The Kokkos back end takes the step as the Naive sequence whatever stepVariant says: the
//        window sums need W, and the one-pass step writes only the SSD force
//        (GreedyStepper::forceFromStep() is false, the force is computed from W every iteration).
// Mi   - Mattes mutual information (core/MutualInformation.hpp; B = miBins) of the fixed image I1 and
//        W over every voxel of the scale grid, each of weight 1 (images of different contrasts;
//        maximised, the mismatch is -MI): G(x) = dMI/dW(x) = (B - 4) h(x) / N, N the voxels, h of
//        (I1(x), W(x)) by the histogram of this iteration's W; F = G grad W (the same clamped central
//        differences). The images are normalised to [0, 1] by the jobs (registration and atlas).
//        The Kokkos back ends sum the histogram in fixed point, form L on the device and take the
//        step as the Naive sequence (as LNCC: the next force needs W).
//
// Solver rule (GreedySolver): Fft - the spectral solve every iteration; Sor - red-black SOR from the
// previous iteration's v (coldSweeps from zero at a scale's first iteration, warmSweeps after);
// Cg - CG from the previous v until the relative residual <= cgTolerance (at most cgMaxIterations);
// HybridSor / HybridCg - the spectral solve at a scale's first iteration, then warm SOR / CG.
//
// ---- Multi-scale (Algorithm 4) --------------------------------------------------------------------
// scales = downsample factors f, coarse to fine, strictly decreasing, the last 1 (e.g. 2,1), with
// iterations[s] per scale. Every factor divides every extent of the grid (the registration job
// pads images so that it does). Voxel x of the scale-f grid (extents n / f) sits at the full-grid
// point X = f x + (f - 1) / 2. The scale-f images are the full images blurred with a Gaussian of
// sigma = f / 2 full-grid voxels (core/Gaussian.hpp, recursive, clamp rule; none for f = 1) and
// sampled trilinearly at X. Between scales (factor g -> f), u and v are up-sampled by trilinear
// reverse mapping with the clamp rule and rescaled to the new voxel size:
//     u_f(x) = (g / f) u_g( (f x + (f - 1)/2 - (g - 1)/2) / g ).
// u starts at zero on the coarsest scale.
//
// ---- Symmetric mode (GreedyParams::symmetric; the registration job's --symmetric) -----------------
// Both images move towards a midpoint on the fixed grid: h_m(x) = x - u_m(x) for the moving image,
// h_f(x) = x - u_f(x) for the fixed one, W_m = I0(h_m), W_f = I1(h_f), both zero at the start. One
// iteration: the two forces from the same state, F_m = force(W_m against W_f) and F_f =
// force(W_f against W_m) (step 1 with the roles of the images exchanged), v_m = L^-1 F_m and
// v_f = L^-1 F_f, then steps 3-6 for each side with delta = maxStep / 2 (both sides together move
// the images at most maxStep voxels apart per iteration), each side's fold refusal its own; the
// scale stops when either side stops. Exchanging I0 and I1 exchanges the roles exactly. The map of
// the registration is h(x) = h_m(h_f^-1(x)): with p = h_f^-1(x) (core/Inverse.hpp, identity
// affine: p - u_f(p) = x, to |g| <= kMidpointInverseTolerance), u(x) = x - h_m(p) = x - p + u_m(p)
// (u_m trilinear at p, clamp rule).
// Each side's fold check does not bound the map's own det(I - grad u) (central differences of the
// composed field), which can fall to <= 0 where the two sides compress steeply. So when the map of
// the last scale's last iteration folds (min det <= 0), the last scale is run again from its start
// with the map formed and checked after every accepted iteration, and stops (GreedyStop::MapFolded)
// before the first iteration whose map folds, keeping both sides of the iteration before (the runs
// are identical up to there). A map that folds at the scale's start is kept (and reported).
// The RMSE recorded is sqrt(mean (W_m - W_f)^2).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/Fluid.hpp"
#include "core/Image.hpp"
#include "core/MutualInformation.hpp"
#include "core/ImageOps.hpp"
#include "core/Inverse.hpp"
#include "core/Registration.hpp"
#include "core/Trilinear.hpp"

namespace kortex {

enum class GreedySolver { Fft, Sor, Cg, HybridSor, HybridCg };

// The image mismatch the force descends (see "Metrics" above).
enum class GreedyMetric { Ssd, Lncc, Mi };
GreedyMetric parseGreedyMetric(std::string const& s);  // ssd|lncc|mi
const char* toString(GreedyMetric m);                   // the same spelling
inline std::ostream& operator<<(std::ostream& os, GreedyMetric m) { return os << toString(m); }

// The LNCC window: radius bounds (2R+1 samples per axis) and the per-sample variance below which a
// window is flat (intensity units^2; the jobs normalise intensities to about [0, 1], where it is a
// standard deviation of 0.001, well above the float rounding of the window sums).
inline constexpr int kMaxLnccRadius = 8;
// The LNCC noise floor: a per-voxel variance (normalised intensities in [0, 1]: noise of 1 % of the
// range) added, times N, to a window's B and C.
inline constexpr double kLnccNoiseVariance = 1e-4;
// The symmetric mode's inversion of h_f: |g| in voxels (the inverse's default, 1e-3, would let the
// two back ends' Newton iterations, exact and central-difference Jacobians, stop 1e-3 apart; a
// step or two more reaches the float rounding of u).
inline constexpr double kMidpointInverseTolerance = 1e-5;
inline InverseParams midpointInverseParams() {
  InverseParams p;
  p.tolerance = kMidpointInverseTolerance;
  return p;
}
GreedySolver parseGreedySolver(std::string const& s);  // fft|sor|cg|hybrid-sor|hybrid-cg
const char* toString(GreedySolver s);                   // the same spelling
inline std::ostream& operator<<(std::ostream& os, GreedySolver s) { return os << toString(s); }
bool usesSor(GreedySolver s);
bool usesCg(GreedySolver s);

// How the Kokkos back end runs steps 4-6 and the next force (gpu/greedy/detail/GreedyKernels.hpp):
//   Naive        - three passes per candidate: compose; warp + SSE + fold check; force.
//   ScratchTiled - one pass: a team composes u' and warps W on an xy tile + apron slice by slice
//                  (z march, ring of three slices in team scratch), then checks det, sums the
//                  SSE and writes u' and the next force F from the ring.
enum class GreedyStepVariant { Naive, ScratchTiled };
GreedyStepVariant parseGreedyStepVariant(std::string const& s);  // naive|scratch-tiled
const char* toString(GreedyStepVariant v);
inline std::ostream& operator<<(std::ostream& os, GreedyStepVariant v) { return os << toString(v); }

struct GreedyParams {
  // alpha 0.1 (the paper: 0.01) with gamma 0.001: the smoothing length sqrt(alpha / gamma) of L
  // is 10 voxels instead of 3. On IXI pairs at 2 mm (docs/greedy.md) the paper's values stop on a
  // fold (min det Dh ~ 0) in every pair, mean Dice 0.589; alpha 0.1 keeps min det Dh >= 0.06
  // without a fold refusal, mean Dice 0.604. Only alpha / gamma matters (eps normalises v).
  FluidParams fluid{0.1, 0.0, 0.001};
  std::vector<int> scales{2, 1};         // downsample factors, coarse to fine, last 1
  std::vector<int> iterations{25, 50};   // per scale (the paper: 25 coarse + 50 fine)
  float maxStep = 1.0f;                  // voxels of the current scale per iteration
  float minStep = 1.0f / 64.0f;          // fold refusals halve the step down to this
  GreedySolver solver = GreedySolver::Fft;
  int coldSweeps = 100;                  // SOR from zero (the paper: 50-100)
  int warmSweeps = 6;                    // SOR from the previous v (the paper: 4-6)
  int cgMaxIterations = 200;
  double cgTolerance = 1e-4;             // relative residual
  SorVariant sorVariant = SorVariant::ScratchTiled;
  MatvecVariant matvecVariant = MatvecVariant::Implicit;
  GreedyStepVariant stepVariant = GreedyStepVariant::ScratchTiled;
  bool recordResidual = false;           // compute the solve's relative residual every iteration
  GreedyMetric metric = GreedyMetric::Ssd;
  int lnccRadius = 2;                    // LNCC window (2R+1)^3 voxels of every scale, R in [1, kMaxLnccRadius]
  int miBins = 32;                       // MI: histogram bins per image, kMinMiBins..kMaxMiBins
  bool symmetric = false;                // both images move to the midpoint (above); pairwise only

  static constexpr int kMaxScaleFactor = 16;
  // Per scale. Far above any schedule that converges (the papers: 25 + 50, 200 single scale); a
  // count beyond it is a typo that would run for days.
  static constexpr int kMaxIterations = 100000;

  void validate() const;                      // throws InvalidArgument
  void validateFor(Geometry const& g) const;  // + 3D, every factor divides every extent, scaled
                                              // extents >= kFluidMinExtent, even when SOR is used,
                                              // >= 2 lnccRadius + 1 with LNCC
};

// The defaults of pairwise registration: `kortex register greedy`, Python register_greedy and the
// greedy study of `kortex validate` (GreedyParams{} stays the paper's SSD schedule, the atlas's
// default): LNCC (radius 2), scales 4, 2, 1 with 50, 50, 100 iterations, max step 0.5 voxel.
// Chosen on the 20 IXI pairs of the greedy study on an H200 (docs/greedy.md "Choosing the
// registration defaults"): mean label Dice 0.689 against SSD's 0.611 with the paper's schedule and
// LNCC's 0.649, at or above FireANTs' Dice on all 20 pairs, no voxel with det <= 0.
GreedyParams greedyRegistrationDefaults();

// The scale rule: factor f (>= 1) divides every extent of g into extents >= kFluidMinExtent.
// Returns why f does not fit g ("scale factor 3 does not divide the extent 20 (pad the images)"),
// or "" when it does. Every back end's and job's scale check asks here.
std::string scaleMisfit(Geometry const& g, int factor);

// The extent quantum of a greedy grid: every scale factor divides a multiple of it (their least
// common multiple), and its scaled extents are even when the solver uses SOR (twice that).
// gridExtentFor(n) is the smallest such multiple >= max(n, e * quantum), e = kFluidMinExtent (with
// LNCC at least 2 lnccRadius + 1, one window): the extent the jobs pad (registration) or clip
// (atlas) a grid to.
Index greedyGridQuantum(GreedyParams const& p);
Index greedyExtentFor(Index n, GreedyParams const& p);

// Extents (nz, ny, nx) of the scale-f grid.
struct GridExtents {
  int nz = 0, ny = 0, nx = 0;
  Index voxels() const { return Index(nz) * ny * nx; }
};
GridExtents scaledExtents(Geometry const& g, int factor);
// Blur sigma (full-grid voxels) before down-sampling by `factor` (0 for factor 1).
float scaleSigma(int factor);
// The scale-f grid in world space: extents n / f, spacing f times, origin at full-grid point
// (f - 1) / 2 (voxel x of the scale-f grid sits at X = f x + (f - 1)/2).
Geometry scaledGeometry(Geometry const& g, int factor);

// ---- the rules every back end's stepper (gpu/greedy/GreedyStepper.hpp, reference_cpu/Greedy.hpp)
// applies; written once here ---------------------------------------------------------------------

// The solver rule (step 2): which solve an iteration runs. Cold / warm: SOR from the current v
// with coldSweeps / warmSweeps (the caller zeroes v where nothing came before it: the first
// iteration of the first scale).
enum class GreedySolveKind { Spectral, SorCold, SorWarm, Cg };
GreedySolveKind greedySolveKind(GreedySolver solver, bool firstIterationOfScale);

// What one trial of a step size gave (steps 4-5).
enum class GreedyTrial { Accepted, Folded, ZeroVelocity };

// What a back end's check of one candidate sums (steps 3-6): sum (W - target)^2 where it warps, min
// det(I - grad u'), and the step's max |v|^2; and the trial they make: ZeroVelocity where max |v| is
// 0, else Accepted where min det > 0, else Folded.
struct GreedyTrialSums {
  double sse;
  float minJ;
  float vmax2;
};
KOKKOS_INLINE_FUNCTION GreedyTrial greedyTrialOf(GreedyTrialSums const& s) {
  if (!(s.vmax2 > 0.0f)) return GreedyTrial::ZeroVelocity;
  return s.minJ > 0.0f ? GreedyTrial::Accepted : GreedyTrial::Folded;
}

// The outcome of one step (steps 3-5; 6 where the back end warps with it).
struct GreedyStepOutcome {
  bool zeroVelocity = false;  // max |v| == 0: no step
  bool accepted = false;      // a step size gave det > 0 everywhere
  float step = 0.0f;          // delta of the accepted step
  int refused = 0;            // fold refusals (halvings)
  float minJacobian = 0.0f;   // of the accepted field (where the back end computes it)
  double sse = 0.0;           // sum (W - target)^2 after the step (where the back end warps with it)
};

// Step 3's eps = delta / m from m^2 = max |v|^2 (0 when v = 0): the quotient in double, rounded
// once to float, as the CPU reference forms it, so that every back end steps by the same eps.
// det(I - grad u) at voxel (z, y, x) of a field u (3, z, y, x), clamped central differences
// (core/Registration.hpp's G): the Jacobian the fold refusal and the atlas's min det check read.
template <class Field>
KOKKOS_INLINE_FUNCTION float deformationDeterminant(Field const& u, int z, int y, int x, int nz, int ny, int nx) {
  const int xm = clampIndex(x - 1, nx), xp = clampIndex(x + 1, nx);
  const int ym = clampIndex(y - 1, ny), yp = clampIndex(y + 1, ny);
  const int zm = clampIndex(z - 1, nz), zp = clampIndex(z + 1, nz);
  float g[9];
  for (int c = 0; c < 3; ++c) {
    g[3 * c + 0] = regCentral(u(c, z, y, xm), u(c, z, y, xp));
    g[3 * c + 1] = regCentral(u(c, z, ym, x), u(c, z, yp, x));
    g[3 * c + 2] = regCentral(u(c, zm, y, x), u(c, zp, y, x));
  }
  return regDeterminant(g);
}

KOKKOS_INLINE_FUNCTION float greedyEps(float delta, float maxNorm2) {
  return maxNorm2 > 0.0f ? static_cast<float>(static_cast<double>(delta) / kx::sqrt(static_cast<double>(maxNorm2))) : 0.0f;
}

// The step-size rule with fold refusal (steps 3-5): delta = maxStep, halved after every refused
// (folded) trial down to minStep; `trial(delta)` composes the candidate of that size and judges
// it. Returns the outcome with `step` and `refused` filled in; the trial fills in the rest.
template <class Trial>
GreedyStepOutcome greedyStepWithFoldRefusal(GreedyParams const& p, Trial&& trial) {
  GreedyStepOutcome out;
  float delta = p.maxStep;
  while (delta >= p.minStep) {
    const GreedyTrial t = trial(delta, out);
    if (t == GreedyTrial::ZeroVelocity) {
      out.zeroVelocity = true;
      return out;
    }
    if (t == GreedyTrial::Accepted) {
      out.accepted = true;
      out.step = delta;
      return out;
    }
    ++out.refused;
    delta *= 0.5f;
  }
  return out;
}

// The symmetric mode ("Symmetric mode" above): a side steps with half the step, and one iteration's
// outcome is its two sides' (each from GreedyStepper's step): accepted when both are, zero velocity
// when either side has it; refusals add up, `step` is the two deltas' sum (how far the images moved
// apart at most), minJacobian the smaller, sse the fixed side's (taken after the moving side's step,
// so between the two new W's).
inline GreedyParams symmetricSideParams(GreedyParams p) {
  p.maxStep /= 2.0f;
  return p;
}
inline GreedyStepOutcome symmetricOutcome(GreedyStepOutcome const& moving, GreedyStepOutcome const& fixed) {
  GreedyStepOutcome o;
  o.zeroVelocity = moving.zeroVelocity || fixed.zeroVelocity;
  o.accepted = moving.accepted && fixed.accepted;
  o.refused = moving.refused + fixed.refused;
  o.step = moving.step + fixed.step;
  o.minJacobian = moving.minJacobian < fixed.minJacobian ? moving.minJacobian : fixed.minJacobian;
  o.sse = fixed.sse;
  return o;
}

enum class GreedyStop { IterationCap, ZeroVelocity, Folded, MapFolded };
const char* toString(GreedyStop s);
std::string explain(GreedyStop s);  // one sentence for users

struct GreedyIteration {
  int scale = 0;          // index into params.scales
  int factor = 1;
  int iteration = 0;      // 1-based within the scale
  double rmse = 0.0;      // after the step (or of the kept field when refused)
  float step = 0.0f;      // delta of the accepted step (voxels of this scale); 0 when none
  int refused = 0;        // fold refusals in this iteration
  float minJacobian = 1.0f;
  FluidSolveReport solve;
  double seconds = 0.0;   // since the start of the registration
};

struct GreedyScaleResult {
  int factor = 1;
  int iterations = 0;     // iterations run
  double rmseStart = 0.0, rmseEnd = 0.0;
  GreedyStop stop = GreedyStop::IterationCap;
  double seconds = 0.0;
};

struct GreedyResult {
  std::vector<GreedyScaleResult> scales;
  std::vector<GreedyIteration> history;
  int iterations = 0;     // over all scales
  int refused = 0;
  float minJacobian = 1.0f;  // of the final field
  double seconds = 0.0;
  InverseStats midpointInverse;  // symmetric mode: the inversion of h_f (core/Inverse.hpp), else zero
  int recordedBlocks = 0;        // Kokkos: speculative blocks launched from a recording (gpu/greedy/Greedy.hpp)
  bool folded() const;       // some scale stopped on a refused fold
};

// The symmetric mode's replay of the last scale ("Symmetric mode" above): its iterations and
// refusals taken out of the result before the scale runs again.
void dropLastScale(GreedyResult& r);

using GreedyProgress = std::function<void(GreedyIteration const&)>;

// ---- per-voxel maths (shared by every Kokkos variant) --------------------------------------------

// F at a voxel from W there, I1 there and W at the six clamped neighbours (m = minus, p = plus):
// out[0..2] = -(W - I1) grad W, grad W = ((wxp - wxm) / 2, (wyp - wym) / 2, (wzp - wzm) / 2).
KOKKOS_INLINE_FUNCTION void greedyForceAt(float w, float fixedValue, float wxm, float wxp, float wym, float wyp,
                                          float wzm, float wzp, float* out) {
  const float r = -(w - fixedValue);
  out[0] = r * (0.5f * (wxp - wxm));
  out[1] = r * (0.5f * (wyp - wym));
  out[2] = r * (0.5f * (wzp - wzm));
}

// F at voxel (z, y, x) from the images W (the warped moving image) and I1.
template <class Img>
KOKKOS_INLINE_FUNCTION void greedyForce(Img const& w, Img const& fixed, int z, int y, int x, float* out) {
  const int nz = static_cast<int>(w.extent(0)), ny = static_cast<int>(w.extent(1)), nx = static_cast<int>(w.extent(2));
  greedyForceAt(w(z, y, x), fixed(z, y, x), w(z, y, clampIndex(x - 1, nx)), w(z, y, clampIndex(x + 1, nx)),
                w(z, clampIndex(y - 1, ny), x), w(z, clampIndex(y + 1, ny), x), w(clampIndex(z - 1, nz), y, x),
                w(clampIndex(z + 1, nz), y, x), out);
}

// ---- LNCC (see "Metrics" above) -------------------------------------------------------------------

// The coefficients of window x from its sums (n = N samples): c[0..3] = a, a mF, a b, a b mW with
// a = 2A/(B'C'), b = A/B'; returns cc(x) = A^2/(B'C') (B' = B + e, C' = C + e, e = n kLnccNoiseVariance).
KOKKOS_INLINE_FUNCTION double lnccWindowTerms(double sW, double sF, double sWW, double sFF, double sWF, double n,
                                              double* c) {
  const double e = n * kLnccNoiseVariance;
  const double A = sWF - sW * sF / n, B = sWW - sW * sW / n + e, C = sFF - sF * sF / n + e;
  const double a = 2.0 * A / (B * C), b = A / B;
  c[0] = a;
  c[1] = a * (sF / n);
  c[2] = a * b;
  c[3] = a * b * (sW / n);
  return A * A / (B * C);
}

// K(x, y) of one axis of n samples: how many offsets o in [-R, R] give clamp(x + o) = y.
KOKKOS_INLINE_FUNCTION int lnccTransposeWeight(int x, int y, int n, int R) {
  const int d = x > y ? x - y : y - x;
  if (x < 0 || x >= n || d > R) return 0;
  return (y == 0 || y == n - 1) ? R + 1 - d : 1;
}

// F at a voxel from W, I1 there, the transposed sums s[0..3] = S[a], S[a mF], S[a b], S[a b mW]
// there and W at the six clamped neighbours (as greedyForceAt).
// G is formed in double (a difference of window sums), the force in float.
KOKKOS_INLINE_FUNCTION void lnccForceAt(float w, float fixedValue, double const* s, float wxm, float wxp, float wym,
                                        float wyp, float wzm, float wzp, float* out) {
  const float g = static_cast<float>(double(fixedValue) * s[0] - s[1] - double(w) * s[2] + s[3]);
  out[0] = g * (0.5f * (wxp - wxm));
  out[1] = g * (0.5f * (wyp - wym));
  out[2] = g * (0.5f * (wzp - wzm));
}

// Trilinear sample of the 3 components of the clamp-extended field u (3, nz, ny, nx) at (px, py, pz)
// (core/Trilinear.hpp).
template <class Field>
KOKKOS_INLINE_FUNCTION void greedySampleField(Field const& u, float px, float py, float pz, float* out) {
  const TrilinearCell<float> c = trilinearCell(px, py, pz, static_cast<int>(u.extent(3)),
                                               static_cast<int>(u.extent(2)), static_cast<int>(u.extent(1)));
  // The corners' offsets within a component, formed once from the view's strides, the
  // components a plane apart: u(c, z, y, x) without the 4-D index arithmetic per read (the same
  // values, so the same bits).
  using Offset = std::ptrdiff_t;
  const auto* base = u.data();
  const Offset plane = static_cast<Offset>(u.stride_0()), sz = static_cast<Offset>(u.stride_1()),
               sy = static_cast<Offset>(u.stride_2()), sx = static_cast<Offset>(u.stride_3());
  const Offset r00 = c.lo[2] * sz + c.lo[1] * sy, r01 = c.lo[2] * sz + c.hi[1] * sy,
               r10 = c.hi[2] * sz + c.lo[1] * sy, r11 = c.hi[2] * sz + c.hi[1] * sy;
  const Offset a0 = c.lo[0] * sx, a1 = c.hi[0] * sx;
  float* none = nullptr;
  for (int k = 0; k < 3; ++k) {
    const auto* q = base + k * plane;
    const float v[8] = {q[r00 + a0], q[r00 + a1], q[r01 + a0], q[r01 + a1],
                        q[r10 + a0], q[r10 + a1], q[r11 + a0], q[r11 + a1]};
    out[k] = trilinearLerp(v, c.t[0], c.t[1], c.t[2], none);
  }
}

// u'(x) = u(x + eps v(x)) - eps v(x) at voxel (z, y, x); out[0..2].
template <class Field, class ConstField>
KOKKOS_INLINE_FUNCTION void greedyCompose(Field const& u, ConstField const& v, float eps, int z, int y,
                                          int x, float* out) {
  const float dx = eps * v(0, z, y, x), dy = eps * v(1, z, y, x), dz = eps * v(2, z, y, x);
  greedySampleField(u, static_cast<float>(x) + dx, static_cast<float>(y) + dy,
                    static_cast<float>(z) + dz, out);
  out[0] -= dx;
  out[1] -= dy;
  out[2] -= dz;
}

}  // namespace kortex
