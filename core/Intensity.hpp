// Intensity normalisation before registration (host code, shared by every back end).
//
// Definition: with lo, hi the pLow and pHigh percentiles of ALL voxels of the image (background
// included; default 0.5 and 99.5), every voxel v becomes clamp((v - lo) / (hi - lo), 0, 1).
// Percentile q of N sorted values x_0 <= ... <= x_{N-1}: linear interpolation between order
// statistics at rank h = (N - 1) q / 100 (NumPy's default "linear" method):
//   x_floor(h) + (h - floor(h)) (x_floor(h)+1 - x_floor(h)).
// When hi <= lo although the image is not constant (e.g. more than pHigh % of the voxels share
// one value), the window falls back to [min, max] and IntensityWindow::fellBack says so.
// Errors (InvalidArgument, message naming the image): a NaN or infinite voxel ("<name> contains
// NaN voxels" / "... infinite voxels"), a constant image ("<name> is constant: nothing to
// register"), an empty image, invalid percentiles.
//
// Bias correction (optional, IntensityParams::biasSigmaMm = s > 0; applied before the window): a
// smooth multiplicative intensity bias removed by dividing each voxel of the head by the head's local
// mean (homomorphic correction):
//   M = { v > kBiasHeadFraction x the 99.5th percentile },  out = v / S(x) in M, 0 elsewhere,
//   S = G_s(v M) / G_s(M),  G_s a Gaussian of s mm (per axis s / spacing voxels, zero outside the grid).
// G_s is taken on a coarse grid: blocks of f_a = max(1, floor(s / (2 spacing_a))) voxels per axis
// summed (so s stays >= 2 coarse voxels), blurred there (radius ceil(3 sigma)), and both sums
// interpolated trilinearly at each voxel (block centres; clamped at the faces) before the division.
// Errors: s not finite or outside [0, kMaxBiasSigmaMm]; an image whose 99.5th percentile is <= 0.
#pragma once

#include <string>
#include <vector>

#include "core/Image.hpp"

namespace kortex {

inline constexpr double kBiasHeadFraction = 0.1;  // of the 99.5th percentile: the head's voxels
inline constexpr double kMaxBiasSigmaMm = 1000.0;

struct IntensityParams {
  double pLow = 0.5;    // percent, in [0, 100)
  double pHigh = 99.5;  // percent, in (pLow, 100]
  double biasSigmaMm = 0.0;  // bias correction's Gaussian (above), mm; 0: none
  void validate() const;  // throws InvalidArgument
};

struct IntensityWindow {
  double lo = 0.0, hi = 1.0;   // the values mapped to 0 and 1
  double min = 0.0, max = 0.0; // the image's range
  bool fellBack = false;       // percentiles coincided: [min, max] used instead
};

// q-th percentile (0 <= q <= 100) of the values (finite), definition above. The order statistics
// are selected exactly by a radix selection on the values' bits (OpenMP threads), the same numbers
// as sorting would give.
double percentile(std::vector<float> const& values, double q);

// The window of the definition above; `name` ("moving image") is used in error messages.
IntensityWindow intensityWindow(HostImage const& img, IntensityParams const& params,
                                std::string const& name);

// The bias-corrected image of the definition above (same geometry and metadata; sigmaMm > 0).
HostImage biasCorrected(HostImage const& img, double sigmaMm, std::string const& name);

// A new image (same geometry and metadata) with the normalised intensities in [0, 1] (bias-corrected
// first where params.biasSigmaMm > 0).
HostImage normaliseIntensity(HostImage const& img, IntensityParams const& params,
                             std::string const& name, IntensityWindow* window = nullptr);

}  // namespace kortex
