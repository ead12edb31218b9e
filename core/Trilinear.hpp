// The trilinear interpolant of every Kokkos variant (per-point maths; the CPU reference has its own,
// reference_cpu/detail/Trilinear.hpp). A sample is a cell, found by one of two boundary rules, and
// one interpolation of the cell's 8 corner values, in float or double:
//   clamp-extended  corners floor(p_a) and floor(p_a) + 1, each clamped to [0, n_a - 1]; fraction
//                   t_a = p_a - floor(p_a) (registration, greedy, apply's field and label samples);
//   closed box      for 0 <= p_a <= n_a - 1: lower corner min(floor(p_a), n_a - 2) (0 when n_a = 1),
//                   upper corner one above (affine, apply's linear sample, inverse);
//   interpolation   along x on the four (y, z) edges, then y, then z: e = c0 + t (c1 - c0); with a
//                   gradient, the exact derivative of the cell's polynomial.
#pragma once

#include <Kokkos_Core.hpp>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"

namespace kortex {

// The clamp-extended cell of a point: corner indices lo / hi and fractions t per axis (x, y, z).
template <class T>
struct TrilinearCell {
  int lo[3], hi[3];
  T t[3];
};

// One axis of the clamp-extended rule (n samples).
template <class T>
KOKKOS_INLINE_FUNCTION void trilinearAxis(T p, int n, int& lo, int& hi, T& t) {
  const T f = kx::math::floor(p);
  // Clamp the corner first: far-outside points must not overflow the int conversion.
  const T b = f < T(-1) ? T(-1) : f;
  const int i = static_cast<int>(b > static_cast<T>(n) ? static_cast<T>(n) : b);
  lo = clampIndex(i, n);
  hi = clampIndex(i + 1, n);
  t = p - f;
}

template <class T>
KOKKOS_INLINE_FUNCTION TrilinearCell<T> trilinearCell(T px, T py, T pz, int nx, int ny, int nz) {
  TrilinearCell<T> c;
  trilinearAxis(px, nx, c.lo[0], c.hi[0], c.t[0]);
  trilinearAxis(py, ny, c.lo[1], c.hi[1], c.t[1]);
  trilinearAxis(pz, nz, c.lo[2], c.hi[2], c.t[2]);
  return c;
}

// One axis of the closed-box rule: the lower corner of 0 <= p <= n - 1 and its fraction.
KOKKOS_INLINE_FUNCTION int trilinearBoxAxis(double p, int n, double* frac) {
  int i = static_cast<int>(p);  // p >= 0: truncation is floor
  if (i > n - 2) i = n - 2 < 0 ? 0 : n - 2;
  *frac = p - static_cast<double>(i);
  return i;
}

// The interpolation of the corner values c[4 dz + 2 dy + dx] at fractions (tx, ty, tz); with
// grad != nullptr also (d/dx, d/dy, d/dz) of the cell's polynomial.
template <class T>
KOKKOS_INLINE_FUNCTION T trilinearLerp(const T* c, T tx, T ty, T tz, T* grad) {
  const T e00 = c[0] + tx * (c[1] - c[0]), e01 = c[2] + tx * (c[3] - c[2]);
  const T e10 = c[4] + tx * (c[5] - c[4]), e11 = c[6] + tx * (c[7] - c[6]);
  const T f0 = e00 + ty * (e01 - e00), f1 = e10 + ty * (e11 - e10);
  if (grad) {
    const T dx0 = (c[1] - c[0]) + ty * ((c[3] - c[2]) - (c[1] - c[0]));
    const T dx1 = (c[5] - c[4]) + ty * ((c[7] - c[6]) - (c[5] - c[4]));
    grad[0] = dx0 + tz * (dx1 - dx0);
    grad[1] = (e01 - e00) + tz * ((e11 - e10) - (e01 - e00));
    grad[2] = f1 - f0;
  }
  return f0 + tz * (f1 - f0);
}

// The corner values of a cell in the order of trilinearLerp; at(z, y, x) reads a voxel (a 3D view).
template <class T, class At>
KOKKOS_INLINE_FUNCTION void trilinearCorners(At const& at, const int* lo, const int* hi, T* c) {
  for (int k = 0; k < 8; ++k)
    c[k] = static_cast<T>(at((k & 4) ? hi[2] : lo[2], (k & 2) ? hi[1] : lo[1], (k & 1) ? hi[0] : lo[0]));
}

// The weight of corner (cx, cy, cz) as a product of the hat weights (1 - t_a or t_a), x first (the
// sum-of-corners form of ITK's interpolators, apply's field and label samples).
KOKKOS_INLINE_FUNCTION double trilinearWeight(const double* t, int cx, int cy, int cz) {
  return (cx ? t[0] : 1.0 - t[0]) * (cy ? t[1] : 1.0 - t[1]) * (cz ? t[2] : 1.0 - t[2]);
}

}  // namespace kortex
