// The CPU references' trilinear interpolant (internal to reference_cpu; written on its own, not from
// core's Kokkos sampler). A sample is a cell of the point p (index units, x first), found by one of
// two boundary rules, and a sum over the cell's 8 corners (z, y, x order, x fastest) of the corner
// value times a product of per-axis factors (x, then y, then z), in double:
//   clamped   corners floor(p_a), floor(p_a) + 1, each clamped to [0, n_a - 1] (the clamp-extended
//             image), t_a = p_a - floor(p_a);
//   box       for 0 <= p_a <= n_a - 1: lower corner min(floor(p_a), n_a - 2), upper corner one
//             above, t_a = p_a - lower corner;
//   value     the hat weights (1 - t_a, t_a);
//   gradient  Central: the same weights on the corners' clamped central differences
//             (T(c(k + e_a)) - T(c(k - e_a))) / 2 (the registration reference's smoothed gradient);
//             Exact: axis a's factors replaced by (-1, 1), the derivative of the cell's polynomial.
// Shared by the registration, inverse, warp, affine and resampling (apply) references.
#pragma once

#include <algorithm>
#include <cmath>

#include "core/Image.hpp"
#include "reference_cpu/Checks.hpp"

namespace kortex::ref::detail {

struct TrilinearCell {
  Index lo[3], hi[3];
  double w[3][2];  // hat weights of the low and high corner
};

// n = (nx, ny, nz).
inline TrilinearCell clampedCell(const Index n[3], const double p[3]) {
  TrilinearCell c;
  for (int a = 0; a < 3; ++a) {
    const double f = std::floor(p[a]);
    const double t = p[a] - f;
    // Beyond one voxel outside, every corner clamps to the edge: bound f before the conversion.
    const Index i = static_cast<Index>(std::min(std::max(f, -1.0), static_cast<double>(n[a])));
    c.lo[a] = clampIndex(i, n[a]);
    c.hi[a] = clampIndex(i + 1, n[a]);
    c.w[a][0] = 1.0 - t;
    c.w[a][1] = t;
  }
  return c;
}

inline TrilinearCell boxCell(const Index n[3], const double p[3]) {
  TrilinearCell c;
  for (int a = 0; a < 3; ++a) {
    c.lo[a] = std::min(static_cast<Index>(std::floor(p[a])), n[a] - 2);
    c.hi[a] = c.lo[a] + 1;
    const double t = p[a] - static_cast<double>(c.lo[a]);
    c.w[a][0] = 1.0 - t;
    c.w[a][1] = t;
  }
  return c;
}

// The weight of corner (cx, cy, cz).
inline double cornerWeight(TrilinearCell const& c, int cx, int cy, int cz) {
  return c.w[0][cx] * c.w[1][cy] * c.w[2][cz];
}

enum class TrilinearGradient { None, Central, Exact };

struct TrilinearSample {
  double value = 0.0;
  double gradient[3] = {0.0, 0.0, 0.0};  // zero with TrilinearGradient::None
};

// at(z, y, x) reads a voxel (a 3D view, or a lambda over one component of a field); n = (nx, ny, nz).
template <class At>
TrilinearSample sampleCell(At const& at, const Index n[3], TrilinearCell const& c, TrilinearGradient gradient) {
  constexpr double kSlope[2] = {-1.0, 1.0};
  TrilinearSample s;
  for (int cz = 0; cz < 2; ++cz)
    for (int cy = 0; cy < 2; ++cy)
      for (int cx = 0; cx < 2; ++cx) {
        const Index k[3] = {cx ? c.hi[0] : c.lo[0], cy ? c.hi[1] : c.lo[1], cz ? c.hi[2] : c.lo[2]};
        const double v = at(k[2], k[1], k[0]);
        const double weight = cornerWeight(c, cx, cy, cz);
        s.value += weight * v;
        if (gradient == TrilinearGradient::Exact) {
          s.gradient[0] += kSlope[cx] * c.w[1][cy] * c.w[2][cz] * v;
          s.gradient[1] += c.w[0][cx] * kSlope[cy] * c.w[2][cz] * v;
          s.gradient[2] += c.w[0][cx] * c.w[1][cy] * kSlope[cz] * v;
        } else if (gradient == TrilinearGradient::Central) {
          for (int a = 0; a < 3; ++a) {  // clamped central difference along axis a at corner k
            Index m[3] = {k[0], k[1], k[2]}, p1[3] = {k[0], k[1], k[2]};
            m[a] = clampIndex(k[a] - 1, n[a]);
            p1[a] = clampIndex(k[a] + 1, n[a]);
            s.gradient[a] += weight * 0.5 * (double(at(p1[2], p1[1], p1[0])) - double(at(m[2], m[1], m[0])));
          }
        }
      }
  return s;
}

// The clamp-extended image at p; withGradient: the Central gradient.
inline TrilinearSample sampleTrilinear(ConstImageView<Kokkos::HostSpace> const& img, const Index n[3], const double p[3],
                                       bool withGradient) {
  return sampleCell(img, n, clampedCell(n, p), withGradient ? TrilinearGradient::Central : TrilinearGradient::None);
}

}  // namespace kortex::ref::detail
