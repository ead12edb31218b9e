#include "core/Gaussian.hpp"

#include <cmath>
#include <vector>

#include "core/Errors.hpp"

namespace kortex {

GaussianVariant parseGaussianVariant(std::string const& s) {
  if (s == "separable") return GaussianVariant::Separable;
  if (s == "recursive") return GaussianVariant::Recursive;
  if (s == "fft") return GaussianVariant::Fft;
  throw InvalidArgument("unknown Gaussian variant '" + s + "' (expected separable|recursive|fft)");
}

const char* toString(GaussianVariant v) {
  switch (v) {
    case GaussianVariant::Separable: return "Separable";
    case GaussianVariant::Recursive: return "Recursive";
    case GaussianVariant::Fft: return "Fft";
  }
  return "?";
}

void GaussianParams::validate() const {
  if (!(sigma > 0.0) || !std::isfinite(sigma) || sigma > kMaxSigma)
    throw InvalidArgument("Gaussian sigma must be in (0, " + std::to_string(kMaxSigma) + "] voxels, got " +
                          std::to_string(sigma));
  if (variant == GaussianVariant::Recursive && sigma < kMinRecursiveSigma)
    throw InvalidArgument("the recursive Gaussian is defined for sigma >= " + std::to_string(kMinRecursiveSigma) +
                          " voxels (use the separable variant below), got " + std::to_string(sigma));
}

int gaussianRadius(double sigma) { return static_cast<int>(std::ceil(3.0 * sigma)); }

std::vector<double> gaussianTaps(double sigma) {
  const int r = gaussianRadius(sigma);
  std::vector<double> g(r + 1);
  double sum = 0.0;
  for (int k = 0; k <= r; ++k) {
    g[k] = std::exp(-double(k) * k / (2.0 * sigma * sigma));
    sum += k == 0 ? g[k] : 2.0 * g[k];
  }
  for (double& v : g) v /= sum;
  return g;
}

RecursiveGaussianCoefficients recursiveGaussianCoefficients(double sigma) {
  GaussianParams{sigma, GaussianVariant::Recursive}.validate();
  const double q = sigma >= 2.5 ? 0.98711 * sigma - 0.96330 : 3.97156 - 4.14554 * std::sqrt(1.0 - 0.26891 * sigma);
  const double b0 = 1.57825 + 2.44413 * q + 1.4281 * q * q + 0.422205 * q * q * q;
  const double b1 = 2.44413 * q + 2.85619 * q * q + 1.26661 * q * q * q;
  const double b2 = -(1.4281 * q * q + 1.26661 * q * q * q);
  const double b3 = 0.422205 * q * q * q;
  RecursiveGaussianCoefficients c;
  c.a[0] = b1 / b0;
  c.a[1] = b2 / b0;
  c.a[2] = b3 / b0;
  c.B = 1.0 - (c.a[0] + c.a[1] + c.a[2]);
  // M: column k = the anti-causal state (dy[N], dy[N+1], dy[N+2]) produced by the causal deviation
  // state (dw[N-1], dw[N-2], dw[N-3]) = e_k under zero input deviation beyond the end.
  for (int k = 0; k < 3; ++k) {
    std::vector<double> dw;
    double s1 = k == 0 ? 1.0 : 0.0, s2 = k == 1 ? 1.0 : 0.0, s3 = k == 2 ? 1.0 : 0.0;
    const std::size_t cap = 10000000;
    while (dw.size() < cap) {
      const double w = c.a[0] * s1 + c.a[1] * s2 + c.a[2] * s3;
      dw.push_back(w);
      s3 = s2;
      s2 = s1;
      s1 = w;
      if (std::fabs(s1) + std::fabs(s2) + std::fabs(s3) < 1e-17) break;
    }
    double y1 = 0.0, y2 = 0.0, y3 = 0.0;  // dy beyond the simulated tail
    std::vector<double> dy(dw.size());
    for (std::size_t i = dw.size(); i-- > 0;) {
      const double y = c.B * dw[i] + c.a[0] * y1 + c.a[1] * y2 + c.a[2] * y3;
      dy[i] = y;
      y3 = y2;
      y2 = y1;
      y1 = y;
    }
    for (int r = 0; r < 3; ++r) c.M[3 * r + k] = std::size_t(r) < dy.size() ? dy[r] : 0.0;
  }
  return c;
}

RecursiveGaussianFloat toFloat(RecursiveGaussianCoefficients const& c) {
  RecursiveGaussianFloat f{};
  f.B = float(c.B);
  f.a1 = float(c.a[0]);
  f.a2 = float(c.a[1]);
  f.a3 = float(c.a[2]);
  for (int i = 0; i < 9; ++i) f.M[i] = float(c.M[i]);
  return f;
}

}  // namespace kortex
