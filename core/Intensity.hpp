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
#pragma once

#include <string>
#include <vector>

#include "core/Image.hpp"

namespace kortex {

struct IntensityParams {
  double pLow = 0.5;    // percent, in [0, 100)
  double pHigh = 99.5;  // percent, in (pLow, 100]
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

// A new image (same geometry and metadata) with the normalised intensities in [0, 1].
HostImage normaliseIntensity(HostImage const& img, IntensityParams const& params,
                             std::string const& name, IntensityWindow* window = nullptr);

}  // namespace kortex
