// Fields and masks shared by the real-data registration tests (tstRegistrationRealData,
// tstGreedyRealData): a known volume-preserving displacement, head masks, error norms.
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/Image.hpp"
#include "core/Phantom.hpp"

namespace kortex::test {

using HostField = VectorField<Kokkos::HostSpace>;

// Voxels whose normalised intensity exceeds `threshold` (validation::headMask's definition).
inline HostImage headMask(HostImage const& fixedNormalised, double threshold) {
  HostImage m("kortex::test::headMask", fixedNormalised.geometry);
  const float* f = fixedNormalised.data.data();
  float* o = m.data.data();
  for (Index i = 0; i < m.numVoxels(); ++i) o[i] = f[i] > threshold ? 1.0f : 0.0f;
  return m;
}

inline Index countMask(HostImage const& m) {
  Index n = 0;
  for (Index i = 0; i < m.numVoxels(); ++i) n += m.data.data()[i] > 0.0f ? 1 : 0;
  return n;
}

// The known displacement: u = curl A (clamped central differences), A a smooth random potential
// (core/Phantom.hpp smoothDisplacement: per component products of sines, wavelengths 0.8-1.6x the
// extent), scaled to max |u| = amp. The discrete divergence D_x u_x + D_y u_y + D_z u_z vanishes
// away from the border (central differences commute), so J = det(I - grad u) = 1 + O(|grad u|^2):
// volume-preserving to first order. Why not smoothDisplacement itself: its field changes volume
// (J in [0.55, 1.57] here, max |u| 3.63 after its gradient limit), and the symmetric-KL prior
// penalises J != 1, so that truth is not near the minimiser of E: measured RMSE 0.91 / 0.33 / 0.15
// voxel at lambda 0.05 / 0.005 / 0 (sigma 4, 150 iterations), E(u_true) = 173 against a final
// E = 26 at lambda 0.05. The curl field (J in [0.86, 1.16]) is what the prior can represent.
inline HostField curlDisplacement(Geometry const& g, double amp, std::uint64_t seed) {
  const HostField a = smoothDisplacement(g, 1.0, seed);
  HostField u("kortex::test::uTrue", g, 3);
  const Index nx = g.nx(), ny = g.ny(), nz = g.nz();
  auto cl = [](Index i, Index n) { return i < 0 ? Index(0) : (i >= n ? n - 1 : i); };
  double peak = 0.0;
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        auto d = [&](int c, int axis) {
          const auto& v = a.data;
          if (axis == 0) return 0.5 * (double(v(c, z, y, cl(x + 1, nx))) - v(c, z, y, cl(x - 1, nx)));
          if (axis == 1) return 0.5 * (double(v(c, z, cl(y + 1, ny), x)) - v(c, z, cl(y - 1, ny), x));
          return 0.5 * (double(v(c, cl(z + 1, nz), y, x)) - v(c, cl(z - 1, nz), y, x));
        };
        const double ux = d(2, 1) - d(1, 2), uy = d(0, 2) - d(2, 0), uz = d(1, 0) - d(0, 1);
        u.data(0, z, y, x) = static_cast<float>(ux);
        u.data(1, z, y, x) = static_cast<float>(uy);
        u.data(2, z, y, x) = static_cast<float>(uz);
        peak = std::max(peak, std::sqrt(ux * ux + uy * uy + uz * uz));
      }
  BOOST_REQUIRE(peak > 0.0);
  float* p = u.data.data();
  for (std::size_t i = 0; i < u.data.size(); ++i) p[i] = static_cast<float>(p[i] * (amp / peak));
  return u;
}

inline double maxNorm(HostField const& u) {
  const Geometry& g = u.geometry;
  double m = 0.0;
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        double s = 0.0;
        for (int c = 0; c < 3; ++c) s += double(u.data(c, z, y, x)) * u.data(c, z, y, x);
        m = std::max(m, std::sqrt(s));
      }
  return m;
}

// sqrt(mean |a - b|^2) over mask > 0 (Euclidean norm of the vector difference, voxels).
inline double rmseInMask(HostField const& a, HostField const& b, HostImage const& mask) {
  const Geometry& g = a.geometry;
  double s = 0.0;
  Index n = 0;
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        if (!(mask.data(z, y, x) > 0.0f)) continue;
        for (int c = 0; c < 3; ++c) {
          const double d = double(a.data(c, z, y, x)) - b.data(c, z, y, x);
          s += d * d;
        }
        ++n;
      }
  return n > 0 ? std::sqrt(s / double(n)) : std::numeric_limits<double>::infinity();
}

inline float minValue(HostImage const& img) {
  float m = std::numeric_limits<float>::infinity();
  for (Index i = 0; i < img.numVoxels(); ++i) m = std::min(m, img.data.data()[i]);
  return m;  // NaN voxels compare false: checked separately by the callers' min J > 0
}

inline float maxValue(HostImage const& img) {
  float m = -std::numeric_limits<float>::infinity();
  for (Index i = 0; i < img.numVoxels(); ++i) m = std::max(m, img.data.data()[i]);
  return m;
}

}  // namespace kortex::test
