// 3D Gaussian blur of a scalar image with the clamp (replicate) boundary rule: the specification
// every back end implements, the parameters and the per-line maths shared by every Kokkos
// variant. Used by greedy registration's multi-scale down-sampler (core/Greedy.hpp). The CPU
// reference (reference_cpu/Gaussian.cpp) implements it independently (double arithmetic, and the
// replicate boundary by explicit padding instead of the closed-form initialisation below).
//
// Variants (one enum, by strategy):
//   Separable - the sampled kernel g_k = exp(-k^2 / (2 sigma^2)), |k| <= r = ceil(3 sigma),
//               normalised to sum 1, applied along x, y, z with the clamp rule. Cost grows with r.
//   Recursive - Young & van Vliet (Signal Processing 44, 1995), third order, per axis: a causal
//               pass  w[n] = B x[n] + a1 w[n-1] + a2 w[n-2] + a3 w[n-3]  then an anti-causal pass
//               y[n] = B w[n] + a1 y[n+1] + a2 y[n+2] + a3 y[n+3], with
//                 q  = 0.98711 sigma - 0.96330                   (sigma >= 2.5)
//                    = 3.97156 - 4.14554 sqrt(1 - 0.26891 sigma) (0.5 <= sigma < 2.5)
//                 b0 = 1.57825 + 2.44413 q + 1.4281 q^2 + 0.422205 q^3
//                 b1 = 2.44413 q + 2.85619 q^2 + 1.26661 q^3,  b2 = -(1.4281 q^2 + 1.26661 q^3)
//                 b3 = 0.422205 q^3,  a_i = b_i / b0,  B = 1 - (a1 + a2 + a3)  (unit DC gain).
//               Cost independent of sigma (6 multiply-adds per sample per axis). Boundary: the
//               signal is extended by its end values (clamp). Left: the causal state starts at
//               the steady state x[0]. Right (after Triggs & Sdika, IEEE TSP 2006): beyond the end
//               the input is the constant x[N-1] = u, so the anti-causal state (y[N], y[N+1],
//               y[N+2]) is u + M (w[N-1] - u, w[N-2] - u, w[N-3] - u) with a 3x3 matrix M that
//               depends only on the coefficients; M is computed here once per sigma by running
//               the homogeneous causal and anti-causal recursions on each unit deviation until it
//               has decayed below 1e-17 (exact to double rounding). A constant image therefore
//               stays constant, and every line is filtered exactly as its infinite clamp
//               extension would be.
//               Accuracy against the exact Gaussian (measured in tstGaussian, impulse response in
//               the middle of a long line, max |h - g| relative to max g): see docs/greedy.md.
//               The formula is defined for sigma >= 0.5 (kMinRecursiveSigma).
//   Fft       - the Separable operator (same sampled kernel, clamp rule) computed spectrally: every
//               axis of extent > 1 is padded by r voxels on each side with the clamp rule, the
//               padded image is transformed (real 3D FFT, float), multiplied by the kernel's DFT
//               on the padded grid, H(kz) H(ky) H(kx) with H(k) = g_0 + 2 sum_{j=1..r} g_j
//               cos(2 pi j k / N) (real: the kernel is symmetric), transformed back and cropped.
//               The padding keeps the periodic wrap-around out of the cropped voxels, so the
//               result equals Separable's up to float rounding. Cost O(N log N) whatever sigma,
//               plus planning per call (the paper's table has an FFT column).
// Images are (nz, ny, nx) float views; a 2D image (nz = 1) is blurred along x and y only, and any
// axis of extent 1 is left as is.
#pragma once

#include <Kokkos_Core.hpp>

#include <ostream>
#include <string>
#include <vector>

namespace kortex {

enum class GaussianVariant { Separable, Recursive, Fft };
GaussianVariant parseGaussianVariant(std::string const& s);  // separable|recursive|fft
const char* toString(GaussianVariant v);
inline std::ostream& operator<<(std::ostream& os, GaussianVariant v) { return os << toString(v); }

struct GaussianParams {
  double sigma = 1.0;  // voxels
  GaussianVariant variant = GaussianVariant::Recursive;

  static constexpr double kMinRecursiveSigma = 0.5;
  static constexpr double kMaxSigma = 64.0;

  void validate() const;  // finite sigma in (0, kMaxSigma] (>= kMinRecursiveSigma for Recursive)
};

// Separable kernel radius ceil(3 sigma) and its normalised taps g[0..r] (g[k] = g[-k]).
int gaussianRadius(double sigma);
std::vector<double> gaussianTaps(double sigma);

// Recursive coefficients and the right-boundary matrix M (row-major), in double.
struct RecursiveGaussianCoefficients {
  double B = 1.0;
  double a[3] = {0.0, 0.0, 0.0};
  double M[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
};
RecursiveGaussianCoefficients recursiveGaussianCoefficients(double sigma);

// The same in float, for the Kokkos kernels.
struct RecursiveGaussianFloat {
  float B, a1, a2, a3;
  float M[9];
};
RecursiveGaussianFloat toFloat(RecursiveGaussianCoefficients const& c);

// ---- per-line maths (shared by every Kokkos variant) ---------------------------------------------

// Recursive Gaussian of the n samples p[0], p[s], ..., p[(n-1) s] in place.
KOKKOS_INLINE_FUNCTION void recursiveGaussianLine(float* p, long s, int n, RecursiveGaussianFloat const& c) {
  const float x0 = p[0], u = p[(n - 1) * s];
  // Causal pass; w[-1] = w[-2] = w[-3] = x0 (steady state of the constant left extension).
  float w1 = x0, w2 = x0, w3 = x0;
  for (int i = 0; i < n; ++i) {
    // B x + a1 w1 + a2 w2 + a3 w3 with B = 1 - a1 - a2 - a3, written so that a constant line
    // stays exactly constant in float (B ~ 0.009 at sigma 8 would otherwise amplify rounding).
    const float x = p[i * s];
    const float w = x + c.a1 * (w1 - x) + c.a2 * (w2 - x) + c.a3 * (w3 - x);
    p[i * s] = w;
    w3 = w2;
    w2 = w1;
    w1 = w;
  }
  // w1 = w[n-1], w2 = w[n-2], w3 = w[n-3] (x0 where the index is negative).
  const float d0 = w1 - u, d1 = w2 - u, d2 = w3 - u;
  float y1 = u + c.M[0] * d0 + c.M[1] * d1 + c.M[2] * d2;  // y[n]
  float y2 = u + c.M[3] * d0 + c.M[4] * d1 + c.M[5] * d2;  // y[n+1]
  float y3 = u + c.M[6] * d0 + c.M[7] * d1 + c.M[8] * d2;  // y[n+2]
  for (int i = n - 1; i >= 0; --i) {
    const float wi = p[i * s];
    const float y = wi + c.a1 * (y1 - wi) + c.a2 * (y2 - wi) + c.a3 * (y3 - wi);
    p[i * s] = y;
    y3 = y2;
    y2 = y1;
    y1 = y;
  }
}

}  // namespace kortex
