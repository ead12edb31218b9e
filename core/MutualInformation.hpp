// Mattes mutual information: the per-voxel maths shared by every Kokkos variant of both registration
// stages (the affine stage's metric, core/Affine.hpp "Mutual information"; the greedy stage's force,
// core/Greedy.hpp "Metrics"), and the host's finish of a histogram. The CPU references implement the
// same text on their own.
//
// Bins: B per image. A fixed (target) value f, normalised to [0, 1], falls in bin
//   i_f = min(floor(clamp(f, 0, 1) B), B - 1)                       (a box window);
// a moving (warped) value m has the continuous bin coordinate u = 2 + (B - 4) clamp(m, 0, 1) and adds
// beta3(u - k) to the bins k = floor(u) - 1 .. floor(u) + 2 (the cubic B-spline window: it sums to 1).
// With p the normalised joint histogram (row = fixed bin), p_f and p_m its marginals:
//   MI = sum over p(i, k) > 0 of p(i, k) log(p(i, k) / (p_f(i) p_m(k))),
// and its derivative with respect to a moving value m at a voxel of weight w (W the histogram's total):
//   dMI/dm = (w / W) (B - 4) h,  h = sum_k beta3'(u - k) L(i_f, k),  L(i, k) = log(p(i, k) / p_m(k))
// where p(i, k) > 0, else 0 (p_f does not depend on m; sum_k beta3' = 0 cancels the logarithms'
// derivatives); 0 where m is outside [0, 1] (clamped: u does not move).
// Kokkos back ends sum the histogram in fixed point (each w beta3 rounded to a multiple of
// 2^-kMiFixedBits): integer sums are the same in any order, so atomics give the same bits every run.
#pragma once

#include <Kokkos_Core.hpp>

#include <vector>

namespace kortex {

inline constexpr int kMinMiBins = 8, kMaxMiBins = 128;
inline constexpr int kMiFixedBits = 30;  // the Kokkos histograms' fixed point: w beta3 in units of 2^-30

// InvalidArgument unless kMinMiBins <= bins <= kMaxMiBins ("mutual information bins must be in ...").
void validateMiBins(int bins);

// MI of the joint histogram p (bins x bins, row = fixed bin, summing to 1), and L into `logRatio`.
double miFromHistogram(std::vector<double> const& p, int bins, std::vector<double>& logRatio);

KOKKOS_INLINE_FUNCTION int miFixedBin(double f, int bins) {
  const double c = f < 0.0 ? 0.0 : f > 1.0 ? 1.0 : f;
  const int i = static_cast<int>(c * bins);
  return i < bins - 1 ? i : bins - 1;
}

KOKKOS_INLINE_FUNCTION double miMovingCoordinate(double m, int bins) {
  const double c = m < 0.0 ? 0.0 : m > 1.0 ? 1.0 : m;
  return 2.0 + (bins - 4) * c;
}

// The window of coordinate u: bins k0 .. k0 + 3 (k0 = floor(u) - 1; k0 + 3 may be B, with weight 0)
// with weights beta3(u - k) and slopes beta3'(u - k).
KOKKOS_INLINE_FUNCTION int miWindow(double u, double* weight, double* slope) {
  const int k0 = static_cast<int>(u) - 1;  // u >= 2
  for (int j = 0; j < 4; ++j) {
    const double t = u - (k0 + j), a = t < 0.0 ? -t : t, sign = t < 0.0 ? -1.0 : 1.0;
    if (a < 1.0) {
      weight[j] = 2.0 / 3.0 - a * a + 0.5 * a * a * a;
      slope[j] = sign * (-2.0 * a + 1.5 * a * a);
    } else if (a < 2.0) {
      const double b = 2.0 - a;
      weight[j] = b * b * b / 6.0;
      slope[j] = -sign * 0.5 * b * b;
    } else {
      weight[j] = 0.0;
      slope[j] = 0.0;
    }
  }
  return k0;
}

// A voxel's histogram counts in fixed point: add(cell, count) for each window bin (cell = i_f B + k)
// with a nonzero count round(w beta3(u - k) 2^kMiFixedBits).
template <class Add>
KOKKOS_INLINE_FUNCTION void miFixedPointCounts(double f, double m, double w, int bins, Add const& add) {
  const int i = miFixedBin(f, bins);
  double weight[4], slope[4];
  const int k0 = miWindow(miMovingCoordinate(m, bins), weight, slope);
  for (int t = 0; t < 4; ++t) {
    const unsigned long long c = static_cast<unsigned long long>(w * weight[t] * double(1ll << kMiFixedBits) + 0.5);
    if (c != 0 && k0 + t < bins) add(i * bins + k0 + t, c);
  }
}

// h of a voxel (above) from its fixed value f, moving value m and L (bins x bins).
template <class LogRatio>
KOKKOS_INLINE_FUNCTION double miSlope(double f, double m, int bins, LogRatio const& logRatio) {
  if (m < 0.0 || m > 1.0) return 0.0;
  const int i = miFixedBin(f, bins);
  double weight[4], slope[4];
  const int k0 = miWindow(miMovingCoordinate(m, bins), weight, slope);
  double h = 0.0;
  for (int j = 0; j < 4; ++j)
    if (k0 + j < bins) h += slope[j] * logRatio(i * bins + k0 + j);
  return h;
}

}  // namespace kortex
