// The CT paper's filter settings for a window size and noise level (the quality study, the
// benchmarks' Table I/II rows and the tuners' problems all use them): Gaussian noise at SNR 25;
// bilateral sigma_s = max(0.5, r / 2), sigma_r = 2 sigma_n; NLM h = sigma_n, patch 7x7 in 2D and
// 3x3x3 in 3D (affordable on a CPU).
#pragma once

#include <algorithm>

#include "core/Bilateral.hpp"
#include "core/Nlm.hpp"

namespace kortex {

inline constexpr double kQualitySnr = 25.0;
inline constexpr int kQualityPatchRadius = 3;
inline constexpr int kQuality3DPatchRadius = 1;
inline constexpr double kQualityBilateralRangeFactor = 2.0;
inline constexpr double kQualityNlmHFactor = 1.0;

inline BilateralParams qualityBilateralParams(int window, double noiseSigma) {
  BilateralParams p;
  p.radius = (window - 1) / 2;
  p.sigmaSpatial = std::max(0.5f, 0.5f * static_cast<float>(p.radius));
  p.sigmaRange = static_cast<float>(kQualityBilateralRangeFactor * noiseSigma);
  p.variant = BilateralVariant::ScratchTiled;
  return p;
}

inline NlmParams qualityNlmParams(int window, double noiseSigma, int patchRadius) {
  NlmParams p;
  p.searchRadius = (window - 1) / 2;
  p.patchRadius = patchRadius;
  p.h = static_cast<float>(kQualityNlmHFactor * noiseSigma);
  p.variant = NlmVariant::BoxSum;
  return p;
}

}  // namespace kortex
