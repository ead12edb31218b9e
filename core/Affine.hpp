// Affine (12-parameter) pre-alignment of 3D images by normalised cross-correlation (NCC) or mutual
// information (MI), multi-resolution: the specification every back end implements, the parameters, the shared
// host optimiser, and the per-voxel maths shared by every Kokkos variant. The CPU reference
// (reference_cpu/Affine.cpp) implements the metric and the resampling from this text on its own;
// it shares only the structs, the optimiser below and the conventions stated here.
//
// ---- Transform ---------------------------------------------------------------------------------
// A transform maps FIXED voxel index coordinates p_f (x, y, z) = (i, j, k) to MOVING voxel index
// coordinates:
//   p_m = M (p_f - c) + c + t,
// c = the fixed grid centre ((n_x - 1)/2, (n_y - 1)/2, (n_z - 1)/2) (conditioning: rotations and
// scalings act about the middle of the volume, so matrix and translation are nearly decoupled).
// Parameters theta (12): M row-major (theta_{3i+j} = M_ij), then t (theta_9..11).
// World (physical, LPS, ITK) coordinates of a grid: w = O + D diag(s) p =: O + B p
// (core/Image.hpp). The world transform of the same mapping, fixed world -> moving world (ITK's
// convention for a registration transform: it maps fixed points to the moving points they take
// their value from), is the 4x4 row-major matrix [A a; 0 0 0 1] with
//   A = B_m M B_f^-1,   a = B_m (c + t - M c) + O_m - A O_f.
// initialTransform(fixed, moving) is the world identity A = I, a = 0 written in index coordinates
// (M = B_m^-1 B_f, ...): grids of different size, spacing, origin or orientation are aligned by
// their headers, and everything after works by resampling. With AffineParams::centreOfMass, the
// world translation is then set to com_moving - com_fixed (intensity-weighted centres of mass in
// world coordinates of the normalised images; A stays I).
//
// ---- Intensities ---------------------------------------------------------------------------------
// Both images are normalised first (core/Intensity.hpp: percentiles pLow/pHigh -> [0, 1], clamped;
// NaN/Inf voxels and constant images are refused there). AffineParams::normalise = false skips
// this: the images must then be normalised, finite and non-constant already (the registration
// job passes its normalised images, so each image is scanned once), and the result's intensity
// windows stay empty.
//
// ---- Metric ----------------------------------------------------------------------------------------
// Overlap: Omega = { fixed voxels p_f whose p_m lies inside the moving volume }, inside meaning
// 0 <= p_m,a <= n_a - 1 on every axis a (closed box of voxel centres, no extrapolation).
// overlap = |Omega| / (number of fixed voxels).
// Moving image at p_m (inside): trilinear interpolation in the cell with lower corner
// i_a = min(floor(p_m,a), n_a - 2) and fractions t_a = p_m,a - i_a in [0, 1]; grad m = the exact
// gradient of that trilinear polynomial in that cell (one-sided on the upper faces).
// Field-of-view weight: each overlap voxel counts with
//   w(p_m) = prod_a ramp(min(p_m,a, n_a - 1 - p_m,a) / kAffineEdgeRamp),  ramp(u) = u^2 (3 - 2 u) on
//   [0, 1], 1 beyond,
// so a voxel enters or leaves the overlap with weight 0 and the metric is continuous in theta.
// (With a hard overlap, each of the ~1 % of voxels a 1-voxel step moves across the field of view's
// edge changed NCC by a jump comparable to the curvature signal near the optimum; the two back
// ends' optimisers, rounding apart, then stopped at different points of a flat optimum, up to
// 0.05 voxel RMS apart on the 20 IXI pairs; docs/greedy.md "CPU reference vs Kokkos on every pair".)
// Weighted sums over Omega, in double on every back end: n = sum w, Sf = sum w f, Sm, Sff, Smm,
// Sfm likewise and, for each parameter k and each factor v in {1, f, m},
// S_vk = sum w v dm/dtheta_k, where with q = p_f - c,
//   dm/dM_ij = g_i q_j,   dm/dt_i = g_i   (g = grad m at p_m; Omega and w are held fixed),
// and the unweighted count |Omega| (the overlap fraction).
// Precision: double on every back end, for p_m, the interpolation, the gradient and the sums.
// The optimiser below accepts or rejects a step by comparing two NCC values; near convergence
// they differ by ~1e-7, which float interpolation (relative error ~1e-7 per voxel) cannot
// resolve: with float kernels the CPU and Kokkos back ends ended 0.39 voxel RMS apart on an IXI
// pair, in double 0.007 (docs/greedy.md "CPU reference vs Kokkos end to end").
// NCC = cov / sqrt(vf vm),  cov = Sfm - Sf Sm / n,  vf = Sff - Sf^2 / n,  vm = Smm - Sm^2 / n.
// dNCC/dtheta_k = (S_fk - Sf S_1k / n) / sqrt(vf vm) - NCC (S_mk - Sm S_1k / n) / vm.
// Degenerate overlap (n < 2, or vf or vm <= kAffineVarianceFloor * (Sff or Smm)): NCC = 0 and a
// zero gradient. The gradient is that of the metric with Omega and w frozen: the weight's slope in
// its ramp, and the kinks of trilinear interpolation on cell faces, are not differentiated
// (finite differences agree wherever every overlap voxel has w = 1).
//
// ---- Mutual information (AffineParams::metric = Mi) ----------------------------------------------
// For images of different contrasts (T2, FLAIR, PD, EPI, CT to T1): Mattes et al. 2003 as
// core/MutualInformation.hpp states it (B = miBins bins, default 32 as elastix's
// AdvancedMattesMutualInformation), over the same Omega, weights w and masks as NCC: each overlap
// voxel adds its weight w to the joint histogram of (f, m(p_m)); MI is maximised. Its gradient with
// Omega and w frozen is dMI/dtheta = sum_x dMI/dm(x) dm/dtheta(x) with dMI/dm there and dm/dtheta as
// for NCC. W = 0 (no overlap voxel): MI = 0 and a zero gradient. The reference sums the histogram in
// double; the Kokkos back ends in fixed point (the same bits every run), then p, MI and L in double on
// the host (miFromHistogram).
//
// ---- Pyramid (host, shared by every back end) -------------------------------------------------------
// Level 0 is the image; level l+1 = reduce(level l): the 5-tap binomial (1, 4, 6, 4, 1)/16 along
// x, y, z, clamp rule (core/Boundary.hpp), sampled at the even voxels: n_{l+1} = ceil(n_l / 2),
// spacing doubled, origin kept (coarse voxel i is fine voxel 2i), direction kept. The metric of a
// level runs on its images smoothed once more: smooth(level) = the same binomial without the
// subsampling (affineSmooth; same grid). This removes most of the trilinear interpolant's kinks
// from the metric (its gradient jumps on every cell face), and with the field-of-view weight the
// two back ends' affines end within 2e-3 voxel RMS of each other on the 20 IXI pairs instead of up
// to 0.05; it also widens the coarse levels' capture range (two IXI pairs whose affine failed
// gained 0.2 in label Dice). The binomial is one expression (affineBinomial5) whose only products
// are by powers of two, exact, so that a contracted multiply-add rounds as the separate operations
// do: a back end that builds its levels itself (AffineMetricBackend::setPyramid: the Kokkos one, on
// its device, where the host's pyramid cost more than all the level's metric evaluations) gets the
// host's bits, and both back ends see bit-identical levels. The run uses
// L = min(levels, the number of levels whose every extent, fixed and moving, is >= kMinExtent).
// A transform is carried between levels through world coordinates (exact: level geometries share
// the world frame).
//
// ---- Degrees of freedom (AffineParams::dof) ----------------------------------------------------------
// Affine: the 12 entries of M and t. Rigid and Similarity fit y_w = s R x_w + b in world space:
// with L_f, L_m the levels' index -> world matrices (direction diag(spacing)), M = L_m^-1 s R L_f.
// The optimiser moves them by composition, never by adding to M: the parameters of a step are a
// rotation vector w (3), for Similarity a log scale sigma (1), and the translation t (3, moving
// voxels), taken at the current transform, M(w, sigma) = L_m^-1 e^sigma exp([w]x) L_m M. Their
// gradient is the chain rule on the metric's 12-vector: dM/dw_k = L_m^-1 [e_k]x L_m M,
// dM/dsigma = M; their scales the RMS displacement they cause over the level's fixed grid,
// sqrt(sum_ij (dM_ij/dp R_j)^2) (R_j below; 1 for t). A step is applied as the exact rotation
// (Rodrigues) and scale, so the transform stays rigid (similar) to rounding. The start (header +
// centre of mass) is a world translation, so every level's M is of that form.
//
// ---- Optimiser (host, shared; core/Affine.cpp) ------------------------------------------------------
// Regular-step gradient ASCENT on the metric (NCC or MI; "NCC" below) with parameter scaling, one level at a time, coarse to fine:
//   scales s_k: 1 for the translations (voxels of that level) and R_j for M_ij, where
//   R_j = sqrt((n_j^2 - 1) / 12) is the RMS of q_j over the level's fixed grid (a change dM_ij
//   moves voxel p_f by q_j dM_ij along axis i: the physical-shift scaling of ITK). (One radius
//   for all nine entries, sqrt(sum_j R_j^2), over-scales them by ~sqrt(3): on the textured
//   phantom of tests/tstAffine.cpp it needed 344 evaluations for a 0.14 voxel error, against 199
//   evaluations and 0.06 voxel with R_j.)
//   direction d_k = (g_k / s_k^2) / |g / s|  (a unit step in the scaled parameters phi = s theta),
//   candidate theta' = theta + step d: every step moves a typical voxel by about `step` voxels.
//   The candidate is accepted iff its world matrix A' has det A' > 0 (no reflection in world
//   space: det M' has the sign of det(B_m^-1 B_f), which is negative when one grid is stored
//   mirrored relative to the other, e.g. a RAS-stored file against an LPS-stored one), its overlap
//   is >= kMinOverlap and
//   NCC(theta') > NCC(theta); otherwise step halves and a new candidate is built from the same
//   theta. Each level starts at step = maxStep and stops when step < minStep (MinStep), when the
//   gradient is zero (ZeroGradient), or after iterationsPerLevel metric evaluations
//   (IterationCap). Both back ends are driven through the same AffineMetricBackend interface, so
//   they make the same decisions except where their metrics differ by float rounding.
//   Speculation (the same decisions, fewer read-backs): after a rejected candidate, theta and its
//   gradient stay, so the next candidates are the same direction at step/2, step/4, ...; up to
//   kAffineSpeculation of them (while >= minStep and within the level's evaluations) are evaluated in
//   one evaluateMany call and replayed in order; those past the first accepted one are dropped and
//   not counted. Results, evaluation counts and progress are those of one candidate at a time.
//   (Measured alternatives, not kept: a BFGS direction with the same step rule reached the same
//   NCC on the six IXI pairs in 65-83 evaluations against 41-97; a rigid stage first was not
//   needed: every IXI pair converged from the header + centre-of-mass start.)
// Before the first level, the start transform is evaluated at level 0: if its overlap is below
// kMinOverlap, InvalidArgument "no overlap after alignment ..." is thrown (likewise if the
// transform carried to a level starts below it there, which the candidate rule makes rare).
// valueInitial / valueFinal: the metric (NCC or MI) at level 0 (its smoothed images) of the start and the
// final transform.
//
// ---- Resampling -----------------------------------------------------------------------------------
// resampleAffine: out(p_f) = trilinear m(p_m) as above where p_m is inside the moving volume,
// and 0 outside (MRI background is 0; replicating edge voxels would paint stripes of skull and
// neck into the corners). resampleAffineLabels (reference only): nearest voxel
// k_a = floor(p_m,a + 0.5), label m(k) if 0 <= k_a <= n_a - 1 on every axis, else 0.
#pragma once

#include <Kokkos_Core.hpp>

#include <array>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/Compat.hpp"
#include "core/Image.hpp"
#include "core/Intensity.hpp"
#include "core/MutualInformation.hpp"
#include "core/Trilinear.hpp"

namespace kortex {

// ---- transform -----------------------------------------------------------------------------------

// The affine map of every back end: y = M (x - c) + c + t, evaluated in that order (the device
// form AffineCoeffs below and AffineTransform::apply). As a registration transform x = p_f, y = p_m
// and c is the fixed grid centre; a plain map y = M x + t (grid index <-> world, the inverse of the
// affine stage, the affines of `kortex apply`) has c = 0. Matrix4 is the 4x4 form of world
// transforms as files hold them (ITK, the registration job's output, `kortex apply`'s chain).
struct AffineTransform {
  std::array<double, 9> matrix{1, 0, 0, 0, 1, 0, 0, 0, 1};  // M, row-major
  std::array<double, 3> translation{0, 0, 0};               // t (moving voxels for a registration)
  std::array<double, 3> centre{0, 0, 0};                    // c (the fixed grid centre for a registration)

  // M = I, t = 0, c = the centre of `fixed` (same index in both grids).
  static AffineTransform identity(Geometry const& fixed);

  std::array<double, 12> parameters() const;  // theta
  void setParameters(std::array<double, 12> const& theta);
  std::array<double, 3> apply(std::array<double, 3> const& pFixed) const;  // p_m
  double determinant() const;  // det M
};

std::ostream& operator<<(std::ostream& os, AffineTransform const& t);

// Centre of a grid in index units: ((nx-1)/2, (ny-1)/2, (nz-1)/2).
std::array<double, 3> gridCentre(Geometry const& g);

using Matrix4 = std::array<double, 16>;  // row-major 4x4, last row 0 0 0 1

// Index transform <-> world (LPS) transform fixed world -> moving world (formulas above).
Matrix4 toWorldMatrix(AffineTransform const& t, Geometry const& fixed, Geometry const& moving);
AffineTransform fromWorldMatrix(Matrix4 const& world, Geometry const& fixed, Geometry const& moving);
// The header alignment: world identity in index coordinates.
AffineTransform initialTransform(Geometry const& fixed, Geometry const& moving);
// Plain maps (centre 0): index -> world (world = O + D diag(s) p), its inverse, and a world matrix.
AffineTransform indexToWorldTransform(Geometry const& g);
AffineTransform worldToIndexTransform(Geometry const& g);
AffineTransform affineOfMatrix(Matrix4 const& m);

// The inverse-consistent mean of two affine maps from one space to another (world matrices, last row
// 0 0 0 1): mean(a, b) = a (a^-1 b)^(1/2), the principal square root by the Denman-Beavers iteration
// (to a relative change <= 1e-13, at most 100 steps). mean(b^-1, a^-1) = mean(a, b)^-1, so the mean
// of a registration's forward fit and its reverse fit inverted is exactly what the pair with its
// images exchanged gives, inverted. InvalidArgument when a, a^-1 b or an iterate is singular, or the
// iteration does not converge (for fits a half turn apart the root is not unique: one is returned).
Matrix4 affineMean(Matrix4 const& a, Matrix4 const& b);

// ITK transform file text ("#Insight Transform File V1.0", AffineTransform_double_3_3, centre
// of rotation 0): what ITK / ANTs read as the fixed -> moving physical transform.
std::string itkTransformText(Matrix4 const& world);

// RMS over the fixed grid of |a(p) - b(p)| (voxels of the moving grid): distance of two transforms.
double rmsMappedPointDistance(AffineTransform const& a, AffineTransform const& b, Geometry const& fixed);

// ---- parameters and results --------------------------------------------------------------------------

// The transform the affine stage fits (world space): a rigid motion (3 rotations, 3 translations),
// a similarity (and one isotropic scale) or a general affine (12 parameters).
enum class AffineDof { Rigid, Similarity, Affine };
const char* toString(AffineDof d);  // "rigid" | "similarity" | "affine"
AffineDof parseAffineDof(std::string const& s);  // InvalidArgument naming the choices
inline std::ostream& operator<<(std::ostream& os, AffineDof d) { return os << toString(d); }
inline int parameterCount(AffineDof d) { return d == AffineDof::Affine ? 12 : d == AffineDof::Rigid ? 6 : 7; }

// The affine stage's metric ("Metric", "Mutual information" above): NCC for images of one contrast,
// MI for any two.
enum class AffineMetricKind { Ncc, Mi };
const char* toString(AffineMetricKind m);  // "ncc" | "mi"
AffineMetricKind parseAffineMetric(std::string const& s);  // InvalidArgument naming the choices
inline std::ostream& operator<<(std::ostream& os, AffineMetricKind m) { return os << toString(m); }

struct AffineParams {
  AffineDof dof = AffineDof::Affine;  // the optimiser's parameters (below, "Degrees of freedom")
  AffineMetricKind metric = AffineMetricKind::Ncc;
  int miBins = 32;                    // MI: bins per image (kMinMiBins..kMaxMiBins)
  int levels = 3;                // pyramid levels: shrink 2^(levels-1), ..., 2, 1
  int iterationsPerLevel = 200;  // cap on metric evaluations per level
  double maxStep = 1.0;          // initial step at every level, voxels of that level
  // Stop below this step (voxels of that level). 0.001, not 0.01: the back ends' metrics differ in
  // rounding only, but levels stopped at 0.01 left their transforms up to 0.007 voxel RMS apart
  // (IXI072 -> IXI052), which the greedy stage amplified (SSD 0.089, LNCC 0.371 voxel apart end to
  // end); at 0.001 the affines end 3e-5 apart and SSD / LNCC 0.000 / 0.089 (docs/greedy.md "CPU
  // reference vs Kokkos end to end"), for about 10 more evaluations per pair.
  double minStep = 0.001;
  bool centreOfMass = true;      // centre-of-mass initialisation of the translation
  bool normalise = true;         // intensity normalisation (core/Intensity.hpp)
  IntensityParams intensity;

  static constexpr int kMaxLevels = 6;
  static constexpr int kMinExtent = 8;  // every extent of every level used

  void validate() const;  // throws InvalidArgument
};

// Below this fraction of the fixed voxels in the overlap, the alignment is refused (start) or a
// candidate rejected (optimiser): NCC over a sliver of the volume is not a meaningful match.
inline constexpr double kMinOverlap = 0.10;
// Candidates evaluated at once after a rejection (Optimiser, "Speculation"). Rejections come mostly alone:
// on three IXI pairs (CPU reference, 2 mm) the back-end calls went 75 / 114 / 95 -> 68 / 109 / 89 with 2,
// 65 / 107 / 88 with 4 and 64 / 107 / 88 with 8, and each batch whose first candidate is accepted computes
// the others for nothing; 2 keeps that waste to one evaluation. 1 turns speculation off.
inline constexpr int kAffineSpeculation = 2;  // docs/greedy.md, "The affine stage's read-backs"
// Relative variance below which a side of the NCC counts as constant (double sums of <= 2^31
// voxels in [0, 1] cancel to ~1e-16 relative; 1e-12 leaves room).
inline constexpr double kAffineVarianceFloor = 1e-12;
// Width (voxels of the level) of the field-of-view weight's ramp at the moving grid's faces.
inline constexpr double kAffineEdgeRamp = 2.0;

// Metric value, gradient and overlap for one transform.
struct AffineMetric {
  double value = 0.0;
  std::array<double, 12> gradient{};  // d value / d theta
  double overlap = 0.0;               // |Omega| / fixed voxels
  Index count = 0;                    // |Omega|
};

enum class AffineStop { MinStep, IterationCap, ZeroGradient };
const char* toString(AffineStop s);
inline std::ostream& operator<<(std::ostream& os, AffineStop s) { return os << toString(s); }

struct AffineLevelResult {
  int level = 0;       // 0 = full resolution
  int shrink = 1;      // 2^level
  std::array<Index, 3> fixedSize{}, movingSize{};
  double valueStart = 0.0, valueEnd = 0.0, overlapEnd = 0.0;
  int evaluations = 0, accepted = 0;
  int batches = 0;     // evaluate / evaluateMany calls (a device back end's read-backs)
  double finalStep = 0.0;
  AffineStop stop = AffineStop::IterationCap;
  double seconds = 0.0;
};

struct AffineResult {
  AffineTransform transform;  // index coords of the ORIGINAL fixed and moving grids
  Matrix4 world{};            // toWorldMatrix(transform, fixed, moving)
  AffineTransform start;      // header (+ centre of mass) initialisation
  AffineMetricKind metric = AffineMetricKind::Ncc;  // AffineParams::metric
  double valueInitial = 0.0, valueFinal = 0.0;      // the metric at level 0, start and final transform
  double overlapInitial = 0.0, overlap = 0.0;
  int evaluations = 0;        // metric evaluations, all levels (+ the two at level 0)
  int batches = 0;            // the back end's evaluate / evaluateMany calls, all levels (+ the two at level 0)
  int levelsUsed = 0;
  double seconds = 0.0;
  IntensityWindow movingWindow, fixedWindow;  // when the stage normalised (AffineParams::normalise)
  std::vector<AffineLevelResult> perLevel;  // coarse to fine
};

struct AffineIteration {
  int level = 0, evaluation = 0;
  double value = 0.0, step = 0.0;
  bool accepted = false;
};
using AffineProgress = std::function<void(AffineIteration const&)>;

// ---- the shared driver ---------------------------------------------------------------------------------

// Cost-function masks (antsRegistration's -x): a fixed voxel counts in the metric only where the
// fixed mask holds it and the moving mask holds the nearest voxel of its mapped point. On the
// images' own grids; an empty HostImage is no mask. A coarse level's mask is the finer one reduced
// (the images' binomial step) then >= 0.5 (affineMaskLevel). The metric's mask of a level is that
// eroded by a box (affineMetricMask): at level 0 by 3 voxels, so that no intensity from outside the
// mask reaches a counted voxel through the metric image's smoothing (radius 2) and the trilinear
// cell (1); at the coarser levels, which only carry the fit towards level 0, by 1 (a 3-voxel erosion
// there would leave too little of a 12^3 level around a lesion). Both back ends see the same binary
// levels; the overlap fraction is relative to the fixed metric mask's voxels.
struct AffineMasks {
  HostImage fixed, moving;
};

// One pyramid level as the metric sees it: the smoothed images and their binary masks (0 / 1; an
// empty HostImage: every voxel counts), and the number of fixed voxels that count.
struct AffineLevelImages {
  HostImage moving, fixed, movingMask, fixedMask;  // moving, fixed: empty where the back end built the pyramid
  Index fixedVoxels = 0;
  AffineMetricKind metric = AffineMetricKind::Ncc;  // what evaluate computes
  int miBins = 32;
  int level = 0;
};

// A back end's metric: the optimiser calls setImages once per level, then evaluate many times.
class AffineMetricBackend {
 public:
  virtual ~AffineMetricBackend() = default;
  // A back end that builds the pyramid itself ("Pyramid" above) from the normalised level-0 images
  // returns true: setImages then gets each level's masks and index, not its images. This default
  // leaves it to the optimiser, on the host.
  virtual bool setPyramid(HostImage const& /*moving*/, HostImage const& /*fixed*/, int /*levels*/) { return false; }
  // The images of the next evaluate calls (one pyramid level; normalised, finite).
  virtual void setImages(AffineLevelImages const& level) = 0;
  // Metric and gradient for t in index coordinates of those images.
  virtual AffineMetric evaluate(AffineTransform const& t) = 0;
  // The metrics of several transforms, in order, each exactly what evaluate gives it (the optimiser's
  // speculative candidates, "Optimiser" above). This default evaluates one after another; a device
  // back end enqueues them all and reads the results back once.
  virtual void evaluateMany(std::vector<AffineTransform> const& ts, std::vector<AffineMetric>& out) {
    out.clear();
    for (auto const& t : ts) out.push_back(evaluate(t));
  }
};

// Checks (3D, extents, finite, non-constant), normalisation, start transform, pyramid and the
// optimiser of the spec, evaluating the metric through `backend`.
AffineResult affineOptimise(HostImage const& moving, HostImage const& fixed, AffineParams const& params,
                            AffineMetricBackend& backend, AffineProgress const& progress = {},
                            AffineMasks const& masks = {});

// One pyramid step (reduce above) on the host.
HostImage affineReduce(HostImage const& img);
// The grid of the next level: extents ceil(n / 2), spacing doubled, origin and direction kept.
Geometry affineReducedGeometry(Geometry const& g);
// The same binomial without subsampling (same grid): the metric's image of a level.
HostImage affineSmooth(HostImage const& img);
// Intensity-weighted centre of mass in world coordinates (weights must be >= 0, sum > 0).
std::array<double, 3> centreOfMassWorld(HostImage const& img);

// Finishes NCC, gradient and overlap from the sums below (used by the Kokkos back end);
// `fixedVoxels` the voxels that count (all, or the fixed mask's).
AffineMetric affineMetricFromSums(const double* sums, Index fixedVoxels);
// The binary mask of a level: nonzero -> 1 (level 0), or the coarse level of the finer one (above);
// the metric's mask of a level (above).
HostImage affineMaskLevel(HostImage const& finer, bool reduce);
HostImage affineMetricMask(HostImage const& level, int radius);
Index affineMaskVoxels(HostImage const& mask);

// ---- per-voxel maths (shared by every Kokkos variant) ----------------------------------------------------

// The pyramid's binomial (1, 4, 6, 4, 1) / 16 of five consecutive samples along an axis ("Pyramid"):
// its products are by powers of two only, so a fused multiply-add gives the bits of separate ones.
KOKKOS_INLINE_FUNCTION double affineBinomial5(double a0, double a1, double a2, double a3, double a4) {
  return (((a0 + a4) + 4.0 * (a1 + a3)) + (4.0 * a2 + 2.0 * a2)) * 0.0625;
}

// Whether a mask (binary, on the moving grid) holds the nearest voxel of an inside point p.
template <class View>
KOKKOS_INLINE_FUNCTION bool affineMaskHolds(View const& mask, const double* p) {
  const int x = static_cast<int>(p[0] + 0.5), y = static_cast<int>(p[1] + 0.5), z = static_cast<int>(p[2] + 0.5);
  return mask(z, y, x) != 0.0f;
}

// Sums layout (double[kAffineSumCount]): n, Sf, Sm, Sff, Smm, Sfm, then S_wk at
// kAffineSumParam + 12 w + k, w = 0 (weight 1), 1 (f), 2 (m).
inline constexpr int kAffineSumN = 0, kAffineSumF = 1, kAffineSumM = 2, kAffineSumFF = 3,
                     kAffineSumMM = 4, kAffineSumFM = 5, kAffineSumParam = 6;
// kAffineSumInside: the number of overlap voxels (unweighted; the overlap fraction).
inline constexpr int kAffineSumInside = kAffineSumParam + 3 * 12;
inline constexpr int kAffineSumCount = kAffineSumInside + 1;

// An AffineTransform as kernel arguments (trivially copyable, 120 bytes).
struct AffineCoeffs {
  double m[9];
  double t[3];
  double c[3];
};
AffineCoeffs affineCoeffs(AffineTransform const& t);

// y = M (x - c) + c + t; q = x - c is returned too (the optimiser's gradient factor).
KOKKOS_INLINE_FUNCTION void affineMap(AffineCoeffs const& a, const double* x, double* q, double* y) {
  for (int j = 0; j < 3; ++j) q[j] = x[j] - a.c[j];
  for (int i = 0; i < 3; ++i)
    y[i] = a.m[3 * i + 0] * q[0] + a.m[3 * i + 1] * q[1] + a.m[3 * i + 2] * q[2] + a.c[i] + a.t[i];
}
KOKKOS_INLINE_FUNCTION void affineMap(AffineCoeffs const& a, const double* x, double* y) {
  double q[3];
  affineMap(a, x, q, y);
}

// Inside the closed box [0, n-1] of the moving grid on every axis (n = nx, ny, nz).
KOKKOS_INLINE_FUNCTION bool affineInside(const double* p, int nx, int ny, int nz) {
  return p[0] >= 0.0 && p[0] <= static_cast<double>(nx - 1) && p[1] >= 0.0 &&
         p[1] <= static_cast<double>(ny - 1) && p[2] >= 0.0 && p[2] <= static_cast<double>(nz - 1);
}

// Trilinear value at an inside point p (extents (nz, ny, nx) of `img`, each >= 2), in double, by the
// closed-box rule (core/Trilinear.hpp); with grad != nullptr also the exact gradient
// (d/dx, d/dy, d/dz) of the cell's polynomial.
template <class View>
KOKKOS_INLINE_FUNCTION double affineSample(View const& img, const double* p, double* grad) {
  const int n[3] = {static_cast<int>(img.extent(2)), static_cast<int>(img.extent(1)), static_cast<int>(img.extent(0))};
  int lo[3], hi[3];
  double t[3], c[8];
  for (int a = 0; a < 3; ++a) {
    lo[a] = trilinearBoxAxis(p[a], n[a], &t[a]);
    hi[a] = lo[a] + 1;
  }
  trilinearCorners(img, lo, hi, c);
  return trilinearLerp(c, t[0], t[1], t[2], grad);
}

// Field-of-view weight of an inside point: prod_a ramp(min(p_a, n_a - 1 - p_a) / kAffineEdgeRamp),
// ramp(u) = u^2 (3 - 2 u) on [0, 1], 1 beyond.
KOKKOS_INLINE_FUNCTION double affineEdgeRampAxis(double p, int n) {
  double u = (p < static_cast<double>(n - 1) - p ? p : static_cast<double>(n - 1) - p) / kAffineEdgeRamp;
  if (u >= 1.0) return 1.0;
  if (u <= 0.0) return 0.0;
  return u * u * (3.0 - 2.0 * u);
}
KOKKOS_INLINE_FUNCTION double affineEdgeWeight(const double* p, int nx, int ny, int nz) {
  return affineEdgeRampAxis(p[0], nx) * affineEdgeRampAxis(p[1], ny) * affineEdgeRampAxis(p[2], nz);
}

// Adds one overlap voxel (weight w, fixed value f, moving value m, gradient g, q = p_f - c) to
// the sums. withGradient == false: only the first six sums.
KOKKOS_INLINE_FUNCTION void affineAccumulate(double* sums, double w, double f, double m, const double* g,
                                             const double* q, bool withGradient) {
  sums[kAffineSumInside] += 1.0;
  sums[kAffineSumN] += w;
  sums[kAffineSumF] += w * f;
  sums[kAffineSumM] += w * m;
  sums[kAffineSumFF] += w * f * f;
  sums[kAffineSumMM] += w * m * m;
  sums[kAffineSumFM] += w * f * m;
  if (!withGradient) return;
  double d[12];
  for (int i = 0; i < 3; ++i) {
    const double gi = w * g[i];
    d[3 * i + 0] = gi * q[0];
    d[3 * i + 1] = gi * q[1];
    d[3 * i + 2] = gi * q[2];
    d[9 + i] = gi;
  }
  for (int k = 0; k < 12; ++k) {
    sums[kAffineSumParam + k] += d[k];
    sums[kAffineSumParam + 12 + k] += f * d[k];
    sums[kAffineSumParam + 24 + k] += m * d[k];
  }
}

}  // namespace kortex
