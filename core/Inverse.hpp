// The inverse of a registration's map (specification; the per-point maths shared by every Kokkos
// variant; the CPU reference, reference_cpu/Inverse.cpp, is written independently).
//
// Kortex keeps a registration as Phi(p) = A(p - u(p)): fixed index p -> moving index, A the affine
// stage (index units, 3x4), u the greedy / fluid displacement on the fixed grid (voxels), trilinear
// between voxels with the clamp rule (p clamped into [0, n - 1] per axis). Its inverse at a moving
// point q is the fixed point p with
//     g(p) = p - u(p) - s = 0,      s = A^-1 q.
// Solved per point by Newton's method with the exact Jacobian of the trilinear interpolant,
// J = I - grad u (det J = det Dh > 0 where the map does not fold), from p0 = s + u(s) (one
// fixed-point step); a step is at most kInverseMaxStep voxels long, halved until |g| decreases, and
// where det J <= kInverseMinDet the direction is the fixed-point step p <- s + u(p). A point has
// converged when |g(p)| <= tolerance; one that has not (a target the interpolated map folds over or
// never reaches) keeps its best point and is counted.
//
// Why invert at the end rather than carry h^-1 through the iterations (h^-1 composed with x - eps v at
// each step): the end result is exact to a residual that is measured per point (|g| is reported), it
// costs one pass of a few Newton steps, and it adds nothing to the iteration, which issue 29 brings to
// its memory floor; a carried inverse accumulates one interpolation error per step (75 steps with the
// default schedule) and doubles the composition traffic of every step.
#pragma once

#include <Kokkos_Core.hpp>

#include <cmath>
#include <string>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Trilinear.hpp"

namespace kortex {

inline constexpr double kInverseMaxStep = 2.0;   // voxels: a Newton step never jumps further
inline constexpr double kInverseMinDet = 1e-3;   // below it J is near singular: take the fixed-point step
inline constexpr int kInverseHalvings = 8;       // a step that does not reduce |g| is halved up to this often

struct InverseParams {
  int maxIterations = 50;    // Newton steps per point
  double tolerance = 1e-3;   // |g| in voxels of the fixed grid
  void validate() const {
    if (maxIterations < 1 || maxIterations > 10000)
      throw InvalidArgument("inverse: Newton steps per point must be in [1, 10000], got " + std::to_string(maxIterations));
    if (!(tolerance > 0.0 && tolerance <= 0.5))
      throw InvalidArgument("inverse: the tolerance must be in (0, 0.5] voxel, got " + std::to_string(tolerance));
  }
};

// Over the points of one inversion.
struct InverseStats {
  double maxResidual = 0.0;  // max |g| at the returned points (voxels)
  long unconverged = 0;      // points with |g| > tolerance
  long points = 0;
};

// u (3, nz, ny, nx) at p (x, y, z; index units): trilinear with p clamped into the grid (the closed-box
// rule of core/Trilinear.hpp), and its exact derivative (jac[c][a] = d u_c / d p_a; 0 along an axis
// where p was clamped).
template <class U>
KOKKOS_INLINE_FUNCTION void inverseSampleField(U const& u, const double p[3], double val[3], double jac[3][3]) {
  const int n[3] = {static_cast<int>(u.extent(3)), static_cast<int>(u.extent(2)), static_cast<int>(u.extent(1))};
  int lo[3], hi[3];
  double t[3];
  bool inside[3];
  for (int a = 0; a < 3; ++a) {
    const double top = static_cast<double>(n[a] - 1);
    const double c = p[a] < 0.0 ? 0.0 : (p[a] > top ? top : p[a]);
    inside[a] = p[a] >= 0.0 && p[a] <= top && n[a] > 1;
    lo[a] = trilinearBoxAxis(c, n[a], &t[a]);
    hi[a] = n[a] > 1 ? lo[a] + 1 : lo[a];
  }
  for (int c = 0; c < 3; ++c) {
    double v[8], g[3];
    trilinearCorners([&](int z, int y, int x) { return u(c, z, y, x); }, lo, hi, v);
    val[c] = trilinearLerp(v, t[0], t[1], t[2], g);
    for (int a = 0; a < 3; ++a) jac[c][a] = inside[a] ? g[a] : 0.0;
  }
}

// |g(p)| = |p - u(p) - s|, and u's Jacobian at p.
template <class U>
KOKKOS_INLINE_FUNCTION double inverseResidual(U const& u, const double p[3], const double s[3], double g[3],
                                              double jac[3][3]) {
  double val[3];
  inverseSampleField(u, p, val, jac);
  for (int a = 0; a < 3; ++a) g[a] = p[a] - val[a] - s[a];
  return kx::math::sqrt(g[0] * g[0] + g[1] * g[1] + g[2] * g[2]);
}

// The Newton direction d = J^-1 g (J = I - jac), or g itself (the fixed-point step) where det J <=
// kInverseMinDet; at most kInverseMaxStep long.
KOKKOS_INLINE_FUNCTION void inverseDirection(const double g[3], const double jac[3][3], double d[3]) {
  double J[3][3];
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) J[r][c] = (r == c ? 1.0 : 0.0) - jac[r][c];
  const double c00 = J[1][1] * J[2][2] - J[1][2] * J[2][1], c01 = J[1][2] * J[2][0] - J[1][0] * J[2][2],
               c02 = J[1][0] * J[2][1] - J[1][1] * J[2][0];
  const double det = J[0][0] * c00 + J[0][1] * c01 + J[0][2] * c02;
  if (det > kInverseMinDet) {  // the adjugate over det
    const double inv[3][3] = {{c00, J[0][2] * J[2][1] - J[0][1] * J[2][2], J[0][1] * J[1][2] - J[0][2] * J[1][1]},
                              {c01, J[0][0] * J[2][2] - J[0][2] * J[2][0], J[0][2] * J[1][0] - J[0][0] * J[1][2]},
                              {c02, J[0][1] * J[2][0] - J[0][0] * J[2][1], J[0][0] * J[1][1] - J[0][1] * J[1][0]}};
    for (int r = 0; r < 3; ++r) d[r] = (inv[r][0] * g[0] + inv[r][1] * g[1] + inv[r][2] * g[2]) / det;
  } else {
    for (int r = 0; r < 3; ++r) d[r] = g[r];
  }
  const double len = kx::math::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
  const double shrink = len > kInverseMaxStep ? kInverseMaxStep / len : 1.0;
  for (int r = 0; r < 3; ++r) d[r] *= shrink;
}

// The fixed point p with p - u(p) = s (above); returns |g(p)| at the returned p. Each step is the
// Newton direction, halved (up to kInverseHalvings times) until |g| decreases; a step that never
// decreases it is taken at the smallest size (the iteration may leave a flat spot).
template <class U>
KOKKOS_INLINE_FUNCTION double inversePoint(U const& u, const double s[3], int maxIterations, double tolerance,
                                           double p[3]) {
  double g[3], jac[3][3], val[3];
  inverseSampleField(u, s, val, jac);
  for (int a = 0; a < 3; ++a) p[a] = s[a] + val[a];
  double residual = inverseResidual(u, p, s, g, jac);
  for (int it = 0; it < maxIterations && residual > tolerance; ++it) {
    double d[3], trial[3], gt[3], jt[3][3];
    inverseDirection(g, jac, d);
    double rt = 0.0;
    for (int h = 0; h <= kInverseHalvings; ++h) {
      for (int a = 0; a < 3; ++a) trial[a] = p[a] - d[a];
      rt = inverseResidual(u, trial, s, gt, jt);
      if (rt < residual) break;
      for (int a = 0; a < 3; ++a) d[a] *= 0.5;
    }
    for (int a = 0; a < 3; ++a) {
      p[a] = trial[a];
      g[a] = gt[a];
      for (int c = 0; c < 3; ++c) jac[a][c] = jt[a][c];
    }
    residual = rt;
  }
  return residual;
}

}  // namespace kortex
