// The CPU references' Mattes MI (specification: core/MutualInformation.hpp), written from the text and
// independently of core's per-voxel functions: the bins, the cubic B-spline window and the finish of a
// joint histogram. Shared by the affine stage's reference (reference_cpu/Affine.cpp) and the greedy
// stage's (reference_cpu/Greedy.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/Image.hpp"

namespace kortex::ref::detail {

struct MiBins {
  Index B;
  // fixed f -> row min(floor(f B), B - 1); moving m -> u = 2 + (B - 4) m (both clamped to [0, 1]).
  Index fixedRow(double f) const { return std::min<Index>(Index(std::floor(std::clamp(f, 0.0, 1.0) * double(B))), B - 1); }
  double movingU(double m) const { return 2.0 + double(B - 4) * std::clamp(m, 0.0, 1.0); }
  static double spline(double t) {
    t = std::abs(t);
    return t >= 2.0 ? 0.0 : t >= 1.0 ? (2.0 - t) * (2.0 - t) * (2.0 - t) / 6.0 : (4.0 - 6.0 * t * t + 3.0 * t * t * t) / 6.0;
  }
  static double splineSlope(double t) {
    const double a = std::abs(t), s = t < 0.0 ? -1.0 : 1.0;
    return a >= 2.0 ? 0.0 : a >= 1.0 ? -s * 0.5 * (2.0 - a) * (2.0 - a) : s * (1.5 * a * a - 2.0 * a);
  }
  // visit(k, u - k) for the window's bins k = floor(u) - 1 .. floor(u) + 2 inside [0, B).
  template <class Visit>
  void window(double u, Visit&& visit) const {
    for (Index k = Index(std::floor(u)) - 1; k <= Index(std::floor(u)) + 2; ++k)
      if (k >= 0 && k < B) visit(k, u - double(k));
  }
  // Adds w beta3(u - k) of moving value m to row fixedRow(f) of h (B x B, row-major).
  void add(std::vector<double>& h, double f, double m, double w) const {
    const Index i = fixedRow(f);
    window(movingU(m), [&](Index k, double t) { h[std::size_t(i * B + k)] += w * spline(t); });
  }
  // h(x) = sum_k beta3'(u - k) L(i_f, k); 0 where m is clamped.
  double slope(double f, double m, std::vector<double> const& logRatio) const {
    if (m < 0.0 || m > 1.0) return 0.0;
    const Index i = fixedRow(f);
    double h = 0.0;
    window(movingU(m), [&](Index k, double t) { h += splineSlope(t) * logRatio[std::size_t(i * B + k)]; });
    return h;
  }
};

// MI of the joint histogram h (B x B, row = fixed bin) normalised by `total`, and L(i, k) =
// log(p(i, k) / p_m(k)) (0 where p = 0) into logRatio.
inline double miOfHistogram(std::vector<double> const& h, double total, Index B, std::vector<double>& logRatio) {
  std::vector<double> p(h.size()), pf(std::size_t(B), 0.0), pm(std::size_t(B), 0.0);
  for (Index i = 0; i < B; ++i)
    for (Index k = 0; k < B; ++k) {
      const double v = h[std::size_t(i * B + k)] / total;
      p[std::size_t(i * B + k)] = v;
      pf[std::size_t(i)] += v;
      pm[std::size_t(k)] += v;
    }
  logRatio.assign(std::size_t(B * B), 0.0);
  double mi = 0.0;
  for (Index i = 0; i < B; ++i)
    for (Index k = 0; k < B; ++k) {
      const double v = p[std::size_t(i * B + k)];
      if (!(v > 0.0)) continue;
      logRatio[std::size_t(i * B + k)] = std::log(v / pm[std::size_t(k)]);
      mi += v * std::log(v / (pf[std::size_t(i)] * pm[std::size_t(k)]));
    }
  return mi;
}

}  // namespace kortex::ref::detail
