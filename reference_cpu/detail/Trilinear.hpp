// The CPU references' trilinear interpolant (internal to reference_cpu): the clamp-extended image
// at a point p (index units, x first), written as the sum of the 8 corner values times the
// products of the 1D hat weights (1 - t, t), in double; optionally the same weighted sum of the
// corners' clamped central differences (T(c(k + e_a)) - T(c(k - e_a))) / 2. Shared by the
// registration reference's force and by the reference warp (reference_cpu/ImageOps.hpp).
#pragma once

#include <algorithm>
#include <cmath>

#include "core/Image.hpp"
#include "reference_cpu/Checks.hpp"

namespace kortex::ref::detail {


struct TrilinearSample {
  double value = 0.0;
  double gradient[3] = {0.0, 0.0, 0.0};
};

// n = (nx, ny, nz) of img (nz, ny, nx); withGradient == false leaves the gradient zero.
inline TrilinearSample sampleTrilinear(ConstImageView<Kokkos::HostSpace> const& img, const Index n[3], const double p[3],
                                       bool withGradient) {
  Index lo[3], hi[3];
  double w[3][2];  // hat weights of the low and high corner
  for (int a = 0; a < 3; ++a) {
    const double f = std::floor(p[a]);
    const double t = p[a] - f;
    // Beyond one voxel outside, every corner clamps to the edge: bound f before the conversion.
    const Index i = static_cast<Index>(std::min(std::max(f, -1.0), static_cast<double>(n[a])));
    lo[a] = clampIndex(i, n[a]);
    hi[a] = clampIndex(i + 1, n[a]);
    w[a][0] = 1.0 - t;
    w[a][1] = t;
  }
  TrilinearSample s;
  for (int cz = 0; cz < 2; ++cz)
    for (int cy = 0; cy < 2; ++cy)
      for (int cx = 0; cx < 2; ++cx) {
        const Index k[3] = {cx ? hi[0] : lo[0], cy ? hi[1] : lo[1], cz ? hi[2] : lo[2]};
        const double weight = w[0][cx] * w[1][cy] * w[2][cz];
        s.value += weight * img(k[2], k[1], k[0]);
        if (!withGradient) continue;
        for (int a = 0; a < 3; ++a) {  // clamped central difference along axis a at corner k
          Index m[3] = {k[0], k[1], k[2]}, p1[3] = {k[0], k[1], k[2]};
          m[a] = clampIndex(k[a] - 1, n[a]);
          p1[a] = clampIndex(k[a] + 1, n[a]);
          s.gradient[a] += weight * 0.5 * (double(img(p1[2], p1[1], p1[0])) - double(img(m[2], m[1], m[0])));
        }
      }
  return s;
}

}  // namespace kortex::ref::detail
