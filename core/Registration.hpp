// Unbiased (symmetric-KL) fluid registration: the specification every back end implements, the
// parameters, and the per-voxel maths shared by every Kokkos variant. Method: Yanovsky et al.
// 2007, GPU strategies of Lee et al. (see docs/registration.md). The CPU reference
// (reference_cpu/Registration.cpp) implements this text independently; it shares only the
// parameter struct and the conventions below.
//
// ---- Grid, fields, conventions -----------------------------------------------------------------
// T (moving, "template") and R (fixed, "reference") are 3D scalar images on the SAME grid
// (nz, ny, nx), every extent >= kMinExtent. The displacement u is a VectorField (core/Image.hpp):
// extents (3, nz, ny, nx), component 0 = x, 1 = y, 2 = z, in VOXEL units of that grid (index
// space; spacing does not enter, as in every Kortex filter). The deformation is h(x) = x - u(x)
// and the deformed template is T(h(x)) = T(x - u(x)).
//
// Derivatives: D_j is the central difference along axis j with the clamp rule of
// core/Boundary.hpp: (D_j a)(i) = ( a(c(i+1)) - a(c(i-1)) ) / 2, c = clamp to [0, n_j-1].
// G(x) = grad u, G_ij = (D_j u_i)(x) (row i = component, column j = axis).
//
// Sample point: p = fl(x - u(x)), the float32 difference on every back end (a double reference
// that kept x - u exactly would put points within half an ulp of a cell face in the other cell,
// where the interpolant's gradient jumps: near u = 0, e.g. at the corners of the volume, the force
// would then differ by a whole forward-vs-backward difference; docs/registration.md "CPU vs GPU").
// Interpolation: T(p) at a non-grid point p = (px, py, pz) is the trilinear interpolant of the
// clamp-extended image (corner indices floor(p), floor(p)+1, each clamped). grad T(p) is the
// trilinear interpolant, with the same corners and weights, of the central-difference gradient
// image D T (the clamp rule below: (D_a T)(k) = (T(c(k + e_a)) - T(c(k - e_a))) / 2 at every grid
// voxel k). It is continuous in p. (The exact gradient of the interpolant, i.e. the exact
// derivative of the discrete energy, jumps whenever p crosses a cell face; those jumps turned
// rounding into different fields: two CPU runs whose moving images differed by 1e-6 relative noise
// ended 0.22 voxel apart after 100 iterations with the exact gradient and < 5e-5 with this one,
// and the CPU and Kokkos back ends 0.74 voxel apart on identical input: docs/registration.md
// "CPU vs GPU".) The force below is therefore a smoothed gradient of the energy, not its exact
// derivative.
//
// ---- Energy --------------------------------------------------------------------------------------
//   A(x) = I - G(x)           (the Jacobian matrix of h),   J(x) = det A(x)
//   Phi(J) = (J - 1) log J    (symmetric KL density, >= 0, = 0 only at J = 1; +inf for J <= 0)
//   E_data = 1/2 sum_x ( T(x - u(x)) - R(x) )^2
//   E_reg  =     sum_x Phi(J(x))
//   E      = E_data + lambda E_reg,   lambda >= 0 (the CLI requires lambda > 0).
// Sums run over all voxels (voxel volume 1 in index space); evaluated in double on every back end.
//
// ---- Force: f = -dE/du (the descent direction; sign convention) ---------------------------------
//   f(x) = f_data(x) + lambda f_reg(x)
//   f_data(x)   = ( T(x - u) - R(x) ) grad T(x - u)     (grad T as defined above)
//       (d/du_i of 1/2 (T(x-u)-R)^2 is -(T(x-u)-R) d_iT(x-u): the minus cancels.)
//   f_reg_i(y)  = sum_j ( D_j^T W_ij )(y),   W_ij = Phi'(J) cof(A)_ij,  Phi'(J) = 1 + log J - 1/J
//       (dJ/dA_ij = cof(A)_ij and dA_ij/du_i = -D_j, so dE_reg/du_i = -sum_j D_j^T W_ij.)
// D_j^T is the exact adjoint of the clamped central difference (adjointCentral below):
//   (D^T w)(i) = 1/2 [ w(i-1)[i>0] + w(i)[i=n-1] - w(i+1)[i<n-1] - w(i)[i=0] ].
// In the interior D^T = -D, so f_reg_i = -sum_j d_j(Phi'(J) cof_ij), the paper's -(d1, d2, d3):
// Eq. (11) of Lee et al. with its products of d_j u_i written as cofactors of A. Evaluating f_reg
// at y needs W at y +- e_j, i.e. G at y +- e_j, i.e. u at y +- e_j +- e_k (the 2-voxel box apron
// covers it, edge-diagonal neighbours included): the "double padding".
//
// ---- Iteration (one rule for every back end; a near-tie E(u') ~ E(u) may be decided differently) --
//   v     = G_sigma * f      separable Gaussian per component, radius ceil(3 sigma), weights
//                            exp(-k^2 / (2 sigma^2)) normalised to sum 1, ZERO boundary (f = 0
//                            outside the grid, no renormalisation). Zero padding keeps G_sigma a
//                            symmetric positive definite matrix, so v . f > 0 and every voxel
//                            gets the same self-weight w_0^3 (the clamp rule would weigh a corner
//                            voxel's own force ~27 times more at sigma 2: docs/registration.md).
//   rate  = v - H v          (du/dt = v - v . grad u: rate_i = v_i - sum_j H_ij v_j), where H is
//                            grad u by UPWIND differences with the clamp rule: H_ij = u_i(x) -
//                            u_i(x - e_j) where v_j(x) > 0, u_i(x + e_j) - u_i(x) where v_j(x) < 0.
//                            (Central differences would make the forward-time centred-space
//                            scheme, which amplifies every Fourier mode by up to sqrt(1 + C^2) per
//                            step; upwind is first order, i.e. slightly diffusive. Measurements:
//                            docs/registration.md "CPU vs GPU".)
//   m     = max_x max(|rate(x)|, |v(x)|_1 / 2)   (|.| Euclidean). m == 0: stop (ZeroVelocity;
//                            the iteration counts).
//   cap_k = maxStep (1 + cos(pi (k - 1) / K)) / 2 (float), k = 1..K the iteration, K = `iterations`:
//                            the largest step of iteration k, maxStep at the first iteration and
//                            down towards 0 at the cap (half a cosine), so that the flow settles.
//   delta = min(delta, cap_k)   (delta carries over from the previous iteration; maxStep at start)
//   dt    = delta / m        so that no voxel moves more than delta voxels in one step, and the
//                            upwind scheme's Courant number sum_j |v_j| dt stays <= 2 delta (<= 1 at
//                            the default maxStep 0.5).
//   u'    = u + dt rate      candidate; accepted iff min J(u') > 0 and E(u') < E(u).
//   On rejection delta halves and the candidate is rebuilt from the same rate; delta < minStep:
//   stop (StepUnderflow), keeping the last accepted field (this is how a step that would fold the
//   Jacobian is refused: the log barrier makes E infinite there). After every accepted candidate
//   delta grows back: delta = min(2 delta, cap_k).
//   Why the decreasing cap: with a constant one (delta back to maxStep after every accepted step)
//   the fastest voxel still moves maxStep voxels per step at the iteration cap, so two runs whose
//   step schedules differ by a step or two (a near-tie E(u') ~ E(u) decided differently, e.g. by
//   back ends whose affine stages ended 1e-3 voxel apart) end up to ~1 voxel apart there; with
//   the cap the last steps are short and the two fields agree far better (docs/registration.md
//   "CPU vs GPU": 1.91 -> 0.52 voxel at the worst voxel on an IXI pair, same Dice).
//   Accepted: if (E(u) - E(u')) / E(u) < tolerance for `patience` accepted steps in a row, stop
//   (Converged). The loop runs at most K times (one v, and one accepted candidate or a step
//   underflow, per iteration); reaching the cap stops with IterationCap.
// The warped template T(x - u(x)) is re-interpolated from the original T at every evaluation (no
// accumulation of interpolation error).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>

#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/FastMath.hpp"
#include "core/Image.hpp"
#include "core/Trilinear.hpp"

namespace kortex {

// Force-kernel strategies (gpu/RegistrationForce*.hpp):
//   Naive     - RangePolicy, one voxel per thread, every u read from global memory.
//   Recompute - xy tile marching through z; only u (tile + 2-voxel apron, 5 z-slices, ring buffer)
//               in team scratch; every thread recomputes G, J, W at its 6 neighbours.
//   Reuse     - xy tile marching through z; W (the stress Phi'(J) cof A) of the current and next
//               slices on tile + 1 apron kept in scratch and reused by the six neighbours; only the
//               newest u slice is loaded per step; buffers recycled as the tile advances.
//   TwoPass   - W computed once per voxel into a 9-component stress field (one pass), then f from W
//               at the voxel and its neighbours read back (a second pass); 36 B per voxel more memory.
enum class RegistrationVariant { Naive, Recompute, Reuse, TwoPass };
RegistrationVariant parseRegistrationVariant(std::string const& s);  // naive|recompute|reuse|two-pass
const char* toString(RegistrationVariant v);
inline std::ostream& operator<<(std::ostream& os, RegistrationVariant v) { return os << toString(v); }

struct RegistrationParams {
  // Defaults chosen on the IXI pairs (H200 sweep, lambda 0.05-4 x sigma 1-2, docs/registration.md):
  // lambda 1, sigma 2 keeps min det J near 0.45 while raising the mean label Dice from 0.37-0.49
  // (affine) to 0.53-0.59; lambda 0.05 drove det J to ~0 within 40 iterations.
  double lambda = 1.0;      // regulariser weight (>= 0 here; the CLI refuses lambda <= 0)
  float sigma = 2.0f;       // velocity smoothing, voxels (> 0, radius ceil(3 sigma) <= kMaxRadius)
  int iterations = 300;     // cap on velocity evaluations, at most kMaxIterations
  static constexpr int kMaxIterations = 100000;  // far above any that converges (default 300); a typo would run for days
  float maxStep = 0.5f;     // largest step (voxels) at the first iteration; the cap decreases after
  float minStep = 1e-3f;    // delta below this: stop (StepUnderflow)
  double tolerance = 1e-5;  // relative energy decrease per accepted step regarded as converged
  int patience = 5;         // ... for this many accepted steps in a row
  // Recompute: the fastest force that needs no memory beyond the fields (240^3 on the H200: 1.133 ms
  // against Naive 1.188, Reuse 1.241), within 4 % of TwoPass (1.088 ms), which costs 36 B per voxel more
  // (bench/results/register_fig1_240_7dcef19_nvidia-h200.md).
  RegistrationVariant variant = RegistrationVariant::Recompute;

  static constexpr int kMinExtent = 4;
  static constexpr int kMaxRadius = 32;

  void validate() const;                      // throws InvalidArgument
  void validateFor(Geometry const& g) const;  // + 3D, every extent >= kMinExtent
};

// Smoothing radius used by every back end.
int smoothingRadius(float sigma);  // ceil(3 sigma)

// cap_k of the spec's step rule: maxStep (1 + cos(pi (k - 1) / K)) / 2, k = 1..K (voxels).
double registrationStepSchedule(float maxStep, int k, int K);

// Energy of one field, as defined above. minJacobian is min_x J(x) (<= 0: folded, total = +inf).
struct RegistrationEnergy {
  double data = 0.0;  // E_data
  double reg = 0.0;   // E_reg (without lambda)
  double total = 0.0; // E_data + lambda E_reg
  float minJacobian = 1.0f;
  bool folded() const { return !(minJacobian > 0.0f); }
};
// total from the two sums (+inf when folded or not finite).
RegistrationEnergy finishEnergy(double data, double reg, float minJacobian, double lambda);

enum class StopReason { Converged, IterationCap, StepUnderflow, ZeroVelocity };
const char* toString(StopReason r);
std::string explain(StopReason r);  // one sentence for users

struct RegistrationIteration {
  int iteration = 0;       // 1-based
  RegistrationEnergy energy;  // of the field after this iteration (accepted or kept)
  float step = 0.0f;       // delta used by the accepted candidate (voxels), or last tried
  int rejected = 0;        // candidates rejected in this iteration
  bool accepted = false;
  double seconds = 0.0;    // wall time since the start of the registration
};

struct RegistrationResult {
  RegistrationEnergy initial, final;
  int iterations = 0;      // velocity evaluations done
  int accepted = 0;
  int rejected = 0;
  StopReason stop = StopReason::IterationCap;
  double seconds = 0.0;
  std::vector<RegistrationIteration> history;
};

// Called after every iteration (progress bars); may be empty.
using RegistrationProgress = std::function<void(RegistrationIteration const&)>;

// ---- per-voxel maths (shared by every Kokkos variant) --------------------------------------------

// G_ij layout in a float[9]: g[3*i + j] = D_j u_i.

// Central difference of the clamp rule from the two neighbours already clamped.
KOKKOS_INLINE_FUNCTION float regCentral(float minus, float plus) { return 0.5f * (plus - minus); }

// J = det(I - G).
KOKKOS_INLINE_FUNCTION float regDeterminant(const float* g) {
  const float a00 = 1.0f - g[0], a01 = -g[1], a02 = -g[2];
  const float a10 = -g[3], a11 = 1.0f - g[4], a12 = -g[5];
  const float a20 = -g[6], a21 = -g[7], a22 = 1.0f - g[8];
  return a00 * (a11 * a22 - a12 * a21) - a01 * (a10 * a22 - a12 * a20) +
         a02 * (a10 * a21 - a11 * a20);
}

// Phi(J) = (J - 1) log J for J > 0 (callers handle J <= 0).
KOKKOS_INLINE_FUNCTION float regPhi(float J) { return (J - 1.0f) * kx::math::log(J); }
// Phi'(J) = 1 + log J - 1/J, formed as log J + (J - 1) / J (no cancellation near J = 1) by fastLog and
// fastDivide (core/FastMath.hpp: the device's intrinsics on CUDA, the standard functions elsewhere):
// the force evaluates it seven times per voxel. On CUDA within kRegPhiPrimeAbsError of the exact value
// for J in [0.5, 2] (where J - 1 is exact), within kRegPhiPrimeRelError of it elsewhere (both terms
// of one sign). J > 0 normal (callers handle J <= 0).
inline constexpr float kRegPhiPrimeAbsError = 6e-7f;  // 2^-21.41 (log) + 2 ulp of |q| <= 1 + the sum's rounding
inline constexpr float kRegPhiPrimeRelError = 8.0f / (1 << 23);  // 3 + 2 ulp + the sum's half ulp, rounded up
KOKKOS_INLINE_FUNCTION float regPhiPrime(float J) { return fastLog(J) + fastDivide(J - 1.0f, J); }

// Stress W = Phi'(J) cof(A), A = I - G, cof(A)_ij = dJ/dA_ij; w[3*i + j]. Returns J.
// For J <= 0 (folded) W is set to 0 and J returned as is, so kernels stay finite; the energy
// reduction reports the fold through min J.
KOKKOS_INLINE_FUNCTION float regStress(const float* g, float* w) {
  const float a00 = 1.0f - g[0], a01 = -g[1], a02 = -g[2];
  const float a10 = -g[3], a11 = 1.0f - g[4], a12 = -g[5];
  const float a20 = -g[6], a21 = -g[7], a22 = 1.0f - g[8];
  const float c00 = a11 * a22 - a12 * a21, c01 = a12 * a20 - a10 * a22, c02 = a10 * a21 - a11 * a20;
  const float c10 = a02 * a21 - a01 * a22, c11 = a00 * a22 - a02 * a20, c12 = a01 * a20 - a00 * a21;
  const float c20 = a01 * a12 - a02 * a11, c21 = a02 * a10 - a00 * a12, c22 = a00 * a11 - a01 * a10;
  const float J = a00 * c00 + a01 * c01 + a02 * c02;
  const float s = J > 0.0f ? regPhiPrime(J) : 0.0f;
  w[0] = s * c00; w[1] = s * c01; w[2] = s * c02;
  w[3] = s * c10; w[4] = s * c11; w[5] = s * c12;
  w[6] = s * c20; w[7] = s * c21; w[8] = s * c22;
  return J;
}

// (D^T w)(i) on an axis of n samples, from w at c(i-1), i, c(i+1) (values at clamped indices).
KOKKOS_INLINE_FUNCTION float adjointCentral(float wMinus, float w0, float wPlus, int i, int n) {
  float s = 0.0f;
  if (i > 0) s += wMinus;
  if (i == n - 1) s += w0;
  if (i < n - 1) s -= wPlus;
  if (i == 0) s -= w0;
  return 0.5f * s;
}

// Trilinear sample of the clamp-extended image `img` (extents nz, ny, nx) at (px, py, pz) in
// index units (core/Trilinear.hpp), with the exact gradient of the interpolant in
// grad[0..2] = (d/dx, d/dy, d/dz).
template <class View>
KOKKOS_INLINE_FUNCTION float regSampleTrilinear(View const& img, float px, float py, float pz,
                                                float* grad) {
  const TrilinearCell<float> c = trilinearCell(px, py, pz, static_cast<int>(img.extent(2)),
                                               static_cast<int>(img.extent(1)), static_cast<int>(img.extent(0)));
  // The corners' offsets from the view's strides, each row formed once (img(z, y, x) without the
  // 3-D index arithmetic per read: the same values, so the same bits).
  using Offset = std::ptrdiff_t;
  const auto* p = img.data();
  const Offset s0 = static_cast<Offset>(img.stride_0()), s1 = static_cast<Offset>(img.stride_1()),
               s2 = static_cast<Offset>(img.stride_2());
  const Offset r00 = c.lo[2] * s0 + c.lo[1] * s1, r01 = c.lo[2] * s0 + c.hi[1] * s1,
               r10 = c.hi[2] * s0 + c.lo[1] * s1, r11 = c.hi[2] * s0 + c.hi[1] * s1, a0 = c.lo[0] * s2,
               a1 = c.hi[0] * s2;
  const float v[8] = {p[r00 + a0], p[r00 + a1], p[r01 + a0], p[r01 + a1],
                      p[r10 + a0], p[r10 + a1], p[r11 + a0], p[r11 + a1]};
  return trilinearLerp(v, c.t[0], c.t[1], c.t[2], grad);
}

// The template and its clamped central-difference gradient at one grid voxel, interleaved so
// that a force kernel reads a corner with one 16-byte load (T is fixed during a registration:
// built once, regSampleAt below).
struct alignas(16) RegSample4 {
  float value, gx, gy, gz;
};

// T and (D_x T, D_y T, D_z T) at grid voxel (x, y, z) of `img` (spec: "Interpolation").
template <class View>
KOKKOS_INLINE_FUNCTION RegSample4 regSampleAt(View const& img, int x, int y, int z) {
  const int nz = static_cast<int>(img.extent(0)), ny = static_cast<int>(img.extent(1)),
            nx = static_cast<int>(img.extent(2));
  RegSample4 s;
  s.value = img(z, y, x);
  s.gx = regCentral(img(z, y, clampIndex(x - 1, nx)), img(z, y, clampIndex(x + 1, nx)));
  s.gy = regCentral(img(z, clampIndex(y - 1, ny), x), img(z, clampIndex(y + 1, ny), x));
  s.gz = regCentral(img(clampIndex(z - 1, nz), y, x), img(clampIndex(z + 1, nz), y, x));
  return s;
}

// T(p) (as regSampleTrilinear) and in grad[0..2] the trilinear interpolant of the clamped
// central-difference gradient at p, from the interleaved image `s4` of regSampleAt (same corners
// and weights for all four channels; continuous in p).
template <class View4>
KOKKOS_INLINE_FUNCTION float regSampleSmoothGradient(View4 const& s4, float px, float py, float pz,
                                                     float* grad) {
  const TrilinearCell<float> c = trilinearCell(px, py, pz, static_cast<int>(s4.extent(2)),
                                               static_cast<int>(s4.extent(1)), static_cast<int>(s4.extent(0)));
  RegSample4 k[8];
  trilinearCorners(s4, c.lo, c.hi, k);
  const float v[8] = {k[0].value, k[1].value, k[2].value, k[3].value, k[4].value, k[5].value, k[6].value, k[7].value};
  const float gx[8] = {k[0].gx, k[1].gx, k[2].gx, k[3].gx, k[4].gx, k[5].gx, k[6].gx, k[7].gx};
  const float gy[8] = {k[0].gy, k[1].gy, k[2].gy, k[3].gy, k[4].gy, k[5].gy, k[6].gy, k[7].gy};
  const float gz[8] = {k[0].gz, k[1].gz, k[2].gz, k[3].gz, k[4].gz, k[5].gz, k[6].gz, k[7].gz};
  float* none = nullptr;
  grad[0] = trilinearLerp(gx, c.t[0], c.t[1], c.t[2], none);
  grad[1] = trilinearLerp(gy, c.t[0], c.t[1], c.t[2], none);
  grad[2] = trilinearLerp(gz, c.t[0], c.t[1], c.t[2], none);
  return trilinearLerp(v, c.t[0], c.t[1], c.t[2], none);
}

// Upwind difference of one component along one axis for the advection term (see "Iteration"):
// backward where the velocity component vj > 0, forward where vj < 0, 0 where vj == 0; the
// neighbours are already clamped.
KOKKOS_INLINE_FUNCTION float regUpwind(float vj, float minus, float centre, float plus) {
  return vj > 0.0f ? centre - minus : (vj < 0.0f ? plus - centre : 0.0f);
}

// rate = v - H v with H_ij = regUpwind(v_j, ...) of u_i along axis j (h[3i + j]).
KOKKOS_INLINE_FUNCTION void regRate(const float* h, const float* v, float* rate) {
  for (int i = 0; i < 3; ++i)
    rate[i] = v[i] - (h[3 * i + 0] * v[0] + h[3 * i + 1] * v[1] + h[3 * i + 2] * v[2]);
}

// The quantity whose maximum over the grid sets the time step: max(|rate|, |v|_1 / 2).
KOKKOS_INLINE_FUNCTION float regStepNorm(const float* rate, const float* v) {
  const float r = kx::sqrt(rate[0] * rate[0] + rate[1] * rate[1] + rate[2] * rate[2]);
  const float c = 0.5f * (kx::fabs(v[0]) + kx::fabs(v[1]) + kx::fabs(v[2]));
  return r > c ? r : c;
}

}  // namespace kortex
