// Image comparison and quality metrics (plain C++/OpenMP on host images).
//
// Definitions (a = image under test, ref = reference, both with the same extents; all sums in
// double precision):
//   maxAbsError(a, ref)      = max_i |a_i - ref_i|
//   maxRelativeError(a, ref) = max_i |a_i - ref_i| / max_i |ref_i|
//                              (the project's definition: the error relative to the peak of the
//                              reference, i.e. to the image's dynamic range; if ref is all zero
//                              the denominator is 1)
//   rmse(a, ref)             = sqrt(mean_i (a_i - ref_i)^2)
//   psnr(a, ref, L)          = 10 log10(L^2 / mean_i (a_i - ref_i)^2)  [dB]; +inf when identical.
//                              L is the data range given by the caller; everywhere in Kortex it is
//                              dataRange(clean) = max - min of the clean / reference image.
//   ssim(a, ref, L)          = mean SSIM of Wang et al. 2004 with a Gaussian window, computed
//                              EXACTLY as scikit-image's
//                                structural_similarity(a, ref, data_range=L, gaussian_weights=True,
//                                                      sigma=1.5, use_sample_covariance=False)
//                              i.e. local statistics by a separable Gaussian filter (sigma 1.5,
//                              truncate 3.5 -> radius 5: 11x11 in 2D, 11x11x11 in 3D, weights
//                              normalised to sum 1), K1 = 0.01, K2 = 0.03, C1 = (K1 L)^2,
//                              C2 = (K2 L)^2, population (biased) variances, and the mean of the
//                              SSIM map over the interior that excludes a 5-voxel border on every
//                              filtered axis (so no boundary rule enters). 2D images (nz == 1) use
//                              the 2D window. Every filtered extent must be >= 11.
// Non-finite voxels in `a` make maxAbsError/maxRelativeError/rmse +inf and psnr -inf, so a
// comparison against a tolerance fails instead of passing on NaN.
#pragma once

#include <string>

#include "core/Image.hpp"

namespace kortex::validation {

double maxAbsError(HostImage const& a, HostImage const& ref);
double maxRelativeError(HostImage const& a, HostImage const& ref);
double rmse(HostImage const& a, HostImage const& ref);
double psnr(HostImage const& a, HostImage const& ref, double dataRange);
double ssim(HostImage const& a, HostImage const& ref, double dataRange);

// max - min over the image (finite voxels only); 0 for a constant image.
double dataRange(HostImage const& img);
double minValue(HostImage const& img);
double maxValue(HostImage const& img);
// True when every voxel is finite.
bool allFinite(HostImage const& img);

// All the error norms of one comparison, computed in one pass.
struct ErrorStats {
  double maxAbs = 0.0;
  double maxRel = 0.0;
  double rmse = 0.0;
  double psnr = 0.0;       // dB, against `dataRange`
  double dataRange = 0.0;  // L used for the PSNR
  double refPeak = 0.0;    // max |ref| (denominator of maxRel)
  long long nonFinite = 0; // voxels of `a` that are NaN/Inf
};

// dataRange <= 0 means "use dataRange(ref)" (and 1 if ref is constant).
ErrorStats compare(HostImage const& a, HostImage const& ref, double dataRange = 0.0);

// Parameters of the SSIM window (fixed to scikit-image's gaussian_weights=True defaults).
struct SsimWindow {
  static constexpr double kSigma = 1.5;
  static constexpr double kTruncate = 3.5;
  static constexpr int kRadius = 5;  // int(kTruncate * kSigma + 0.5)
  static constexpr double kK1 = 0.01;
  static constexpr double kK2 = 0.03;
};

}  // namespace kortex::validation
