// The fluid (Navier-Stokes) operator of greedy diffeomorphic registration and its solves: the
// specification every back end implements, the parameters, and the per-voxel maths shared by
// every Kokkos variant (Ha et al. 2010 after Christensen et al. 1996; docs/greedy.md). The CPU
// reference (reference_cpu/Fluid.cpp) implements this text independently.
//
// ---- Operator ------------------------------------------------------------------------------------
// Positive-definite form, on a 3-component field v (core VectorField, extents (3, nz, ny, nx),
// component 0 = x), voxel units, spacing 1:
//     L v = -alpha lap v - beta grad(div v) + gamma v,     alpha > 0, beta >= 0, gamma > 0.
// (The paper writes alpha lap v + gamma v = F but its implicit matvec puts 6 alpha + gamma on the
// diagonal, i.e. this operator; -lap is positive semi-definite, so L is SPD for gamma > 0.)
//
// Boundary: PERIODIC for every solver (indices taken mod n). Reasons (docs/greedy.md):
//   * the spectral solve is then exact with a plain real FFT of the grid itself (a zero-Dirichlet
//     sine transform needs an odd extension to 2(n+1) per axis on cuFFT, ~8x the data);
//   * the force vanishes on the image background, and with the paper's alpha/gamma = 10 the Green's
//     function of L decays over sqrt(alpha/gamma) ~ 3 voxels, so the wrap couples nothing that is
//     not already background; the registration job pads every image with background anyway;
//   * SOR and CG then solve exactly the same linear system as the FFT (tested).
//
// Discretisation, w(x) at x + a e_j read periodically (c, j component / axis indices):
//   (L v)_c(x) = (6 alpha + gamma) v_c(x) - alpha sum_j [ v_c(x + e_j) + v_c(x - e_j) ]
//                - beta [ v_c(x + e_c) - 2 v_c(x) + v_c(x - e_c) ]
//                - beta sum_{j != c} ( v_j(x+e_c+e_j) - v_j(x+e_c-e_j) - v_j(x-e_c+e_j) + v_j(x-e_c-e_j) ) / 4
// i.e. the 7-point Laplacian per component and, for grad div, the second difference along c
// and the product of two central differences D_c D_j (symmetric: D is antisymmetric and the D's
// commute). L is therefore a symmetric matrix: x^T L y = y^T L x, and x^T L x > 0 for x != 0.
//
// Symbol: with theta_j = 2 pi k_j / n_j, w_j = 4 sin^2(theta_j / 2), s_j = sin(theta_j), W = sum w_j:
//     Lhat = diag(a) + beta s s^T,   a_c = alpha W + gamma + beta w_c^2 / 4
// (since w_c - s_c^2 = w_c^2 / 4). Its inverse by Sherman-Morrison:
//     Lhat^{-1} F = F / a - beta (s / a) (s . F / a) / (1 + beta s . (s / a)).
// Spectral solve: v = IFFT( Lhat^{-1} FFT(F) ), exact up to floating-point rounding.
//
// Iterative solves (start from the v passed in: zero for a cold start, the previous iteration's v
// for a warm one), with the relative residual |F - L v|_2 / |F|_2 (double sums) as the measure:
//   * red-black SOR (beta = 0 only: the components decouple): colour(x) = (x + y + z) mod 2; a
//     sweep updates every red voxel (colour 0), then every black one, each as
//         v_c <- (1 - omega) v_c + omega ( F_c + alpha sum_{j,+-} v_c(x +- e_j) ) / (6 alpha + gamma).
//     The two colours form a proper colouring of the periodic grid only when every extent is
//     even: SOR requires even extents. omega is the optimum for the Jacobi spectral radius
//     rho = 6 alpha / (6 alpha + gamma) (reached by the constant mode on a periodic grid):
//         omega = 2 / (1 + sqrt(1 - rho^2)).
//     Block SOR (Algorithm 3) performs exactly these sweeps (same result up to rounding order,
//     here: the same operations, so identical values), tile by tile in team scratch.
//   * conjugate gradients on the 3N system, matrix-free (Implicit: the stencil above) or through
//     an assembled CSR matrix (Explicit: the paper's sparse baseline); stops when the relative
//     residual <= tolerance or after maxIterations.
#pragma once

#include <Kokkos_Core.hpp>

#include <ostream>
#include <string>

#include "core/Compat.hpp"

namespace kortex {

struct FluidParams {
  // Paper defaults (Ha et al. 2010): alpha 0.01, gamma 0.001, beta "often negligible".
  double alpha = 0.01;
  double beta = 0.0;
  double gamma = 0.001;

  void validate() const;  // alpha > 0, beta >= 0, gamma > 0, all finite (InvalidArgument)
};

// Red-black SOR strategies:
//   Naive        - two launches per sweep (red, then black), one voxel per thread, global memory;
//   ScratchTiled - Algorithm 3: one launch per sweep; an xy tile (+ 2-voxel apron) marches along z
//                  with a ring of 4 slices in team scratch, updating red on slice k (tile + 1
//                  apron, recomputed by neighbouring tiles) and black on slice k - 1 in the same
//                  pass; reads v from one buffer and writes the other (ping-pong).
enum class SorVariant { Naive, ScratchTiled };
SorVariant parseSorVariant(std::string const& s);  // naive|scratch-tiled
const char* toString(SorVariant v);
inline std::ostream& operator<<(std::ostream& os, SorVariant v) { return os << toString(v); }

// CG matvec strategies: Implicit (matrix-free stencil, Fig 6) | Explicit (assembled CSR).
enum class MatvecVariant { Implicit, Explicit };
MatvecVariant parseMatvecVariant(std::string const& s);  // implicit|explicit
const char* toString(MatvecVariant v);
inline std::ostream& operator<<(std::ostream& os, MatvecVariant v) { return os << toString(v); }

// What an iterative solve did.
struct FluidSolveReport {
  int iterations = 0;         // SOR sweeps or CG iterations
  double residual = -1.0;     // relative residual at the end (-1: not computed)
};

// Device-copyable coefficients of L.
struct FluidOperator {
  float alpha = 0.01f, beta = 0.0f, gamma = 0.001f;
};
FluidOperator makeFluidOperator(FluidParams const& p);

// SOR's omega (above).
double sorOmega(FluidParams const& p);

// Smallest extent any solver accepts (the stencil reaches +-1 with distinct neighbours).
inline constexpr int kFluidMinExtent = 4;

// The SOR rule: red-black SOR solves the operator with beta = 0 only (the components decouple) on
// a periodic grid of even extents (the red-black colouring). Returns why SOR cannot solve this
// operator on this grid, or "" when it can. Every SOR entry point and parameter check asks here.
std::string sorUnsuitable(FluidParams const& p, int nz, int ny, int nx);

// Number of stored non-zeros per row of the explicit CSR matrix: 7 (beta = 0) or 15.
inline int fluidCsrRowNonZeros(double beta) { return beta == 0.0 ? 7 : 15; }

// ---- per-voxel maths (shared by every Kokkos variant) --------------------------------------------

// Periodic index for i in [-n, 2n).
KOKKOS_INLINE_FUNCTION int fluidWrap(int i, int n) { return i < 0 ? i + n : (i >= n ? i - n : i); }

// (L v)(x) for all 3 components at voxel (z, y, x) of a (3, nz, ny, nx) view.
template <class View>
KOKKOS_INLINE_FUNCTION void fluidApply(View const& v, FluidOperator const& op, int z, int y, int x,
                                       float* out) {
  const int nz = static_cast<int>(v.extent(1)), ny = static_cast<int>(v.extent(2)),
            nx = static_cast<int>(v.extent(3));
  const int zm = fluidWrap(z - 1, nz), zp = fluidWrap(z + 1, nz);
  const int ym = fluidWrap(y - 1, ny), yp = fluidWrap(y + 1, ny);
  const int xm = fluidWrap(x - 1, nx), xp = fluidWrap(x + 1, nx);
  const float diag = 6.0f * op.alpha + op.gamma;
  float second[3];  // second difference of v_c along its own axis c
  for (int c = 0; c < 3; ++c) {
    const float centre = v(c, z, y, x);
    const float mx = v(c, z, y, xm), px = v(c, z, y, xp);
    const float my = v(c, z, ym, x), py = v(c, z, yp, x);
    const float mz = v(c, zm, y, x), pz = v(c, zp, y, x);
    out[c] = diag * centre - op.alpha * (mx + px + my + py + mz + pz);
    second[c] = c == 0 ? (px - 2.0f * centre + mx) : (c == 1 ? (py - 2.0f * centre + my)
                                                             : (pz - 2.0f * centre + mz));
  }
  if (op.beta != 0.0f) {
    // Mixed terms D_c D_j v_j for the three axis pairs (each pair serves both components).
    // (x, y): v_y along x-y diagonals for c = x; v_x for c = y.
    auto cross = [&](int comp, int za, int ya, int xa, int zb, int yb, int xb, int zc, int yc,
                     int xc, int zd, int yd, int xd) {
      return 0.25f * (v(comp, za, ya, xa) - v(comp, zb, yb, xb) - v(comp, zc, yc, xc) +
                      v(comp, zd, yd, xd));
    };
    const float dxy_vy = cross(1, z, yp, xp, z, ym, xp, z, yp, xm, z, ym, xm);
    const float dxy_vx = cross(0, z, yp, xp, z, ym, xp, z, yp, xm, z, ym, xm);
    const float dxz_vz = cross(2, zp, y, xp, zm, y, xp, zp, y, xm, zm, y, xm);
    const float dxz_vx = cross(0, zp, y, xp, zm, y, xp, zp, y, xm, zm, y, xm);
    const float dyz_vz = cross(2, zp, yp, x, zm, yp, x, zp, ym, x, zm, ym, x);
    const float dyz_vy = cross(1, zp, yp, x, zm, yp, x, zp, ym, x, zm, ym, x);
    out[0] -= op.beta * (second[0] + dxy_vy + dxz_vz);
    out[1] -= op.beta * (dxy_vx + second[1] + dyz_vz);
    out[2] -= op.beta * (dxz_vx + dyz_vy + second[2]);
  }
}

// Lhat^{-1} applied to one frequency's three complex coefficients (re[c], im[c]) in place; kz, ky,
// kx are the frequency indices of a grid of extents nz, ny, nx.
KOKKOS_INLINE_FUNCTION void fluidSymbolSolve(FluidOperator const& op, int kz, int ky, int kx, int nz,
                                             int ny, int nx, float* re, float* im) {
  const float twoPi = 6.28318530717958647692f;
  const float tz = twoPi * static_cast<float>(kz) / static_cast<float>(nz);
  const float ty = twoPi * static_cast<float>(ky) / static_cast<float>(ny);
  const float tx = twoPi * static_cast<float>(kx) / static_cast<float>(nx);
  const float hx = kx::math::sin(0.5f * tx), hy = kx::math::sin(0.5f * ty), hz = kx::math::sin(0.5f * tz);
  const float w[3] = {4.0f * hx * hx, 4.0f * hy * hy, 4.0f * hz * hz};
  const float W = w[0] + w[1] + w[2];
  float a[3];
  for (int c = 0; c < 3; ++c) a[c] = op.alpha * W + op.gamma + 0.25f * op.beta * w[c] * w[c];
  for (int c = 0; c < 3; ++c) {
    re[c] /= a[c];
    im[c] /= a[c];
  }
  if (op.beta != 0.0f) {
    const float s[3] = {kx::math::sin(tx), kx::math::sin(ty), kx::math::sin(tz)};
    float sRe = 0.0f, sIm = 0.0f, sAs = 0.0f;  // s . (F / a) and s . (s / a)
    for (int c = 0; c < 3; ++c) {
      sRe += s[c] * re[c];
      sIm += s[c] * im[c];
      sAs += s[c] * s[c] / a[c];
    }
    const float k = op.beta / (1.0f + op.beta * sAs);
    for (int c = 0; c < 3; ++c) {
      re[c] -= k * (s[c] / a[c]) * sRe;
      im[c] -= k * (s[c] / a[c]) * sIm;
    }
  }
}

// One SOR update of a voxel from its value, the right-hand side and the sum of its six
// (periodic) neighbours: (1 - omega) v + omega (F + alpha nsum) / (6 alpha + gamma).
KOKKOS_INLINE_FUNCTION float fluidSorUpdate(FluidOperator const& op, float omega, float v, float f,
                                            float neighbourSum) {
  return (1.0f - omega) * v + omega * (f + op.alpha * neighbourSum) / (6.0f * op.alpha + op.gamma);
}

}  // namespace kortex
