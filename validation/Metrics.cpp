#include "validation/Metrics.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/Errors.hpp"

namespace kortex::validation {

namespace {

void requireSameExtents(HostImage const& a, HostImage const& b, const char* what) {
  for (int r = 0; r < 3; ++r)
    if (a.data.extent(r) != b.data.extent(r))
      throw InvalidArgument(std::string(what) + ": images differ in size (" +
                            std::to_string(a.data.extent(2)) + "x" + std::to_string(a.data.extent(1)) +
                            "x" + std::to_string(a.data.extent(0)) + " vs " +
                            std::to_string(b.data.extent(2)) + "x" + std::to_string(b.data.extent(1)) +
                            "x" + std::to_string(b.data.extent(0)) + ")");
  if (a.data.size() == 0) throw InvalidArgument(std::string(what) + ": empty image");
}

constexpr double kInf = std::numeric_limits<double>::infinity();
// Below this many elements a loop runs on one thread (a parallel region costs more).
constexpr long long kParallelMin = 1 << 16;

}  // namespace

ErrorStats compare(HostImage const& a, HostImage const& ref, double range) {
  requireSameExtents(a, ref, "compare");
  const float* pa = a.data.data();
  const float* pr = ref.data.data();
  const long long n = static_cast<long long>(a.data.size());
  double maxAbs = 0.0, peak = 0.0, sumSq = 0.0;
  double rmin = kInf, rmax = -kInf;
  long long bad = 0;
#pragma omp parallel for reduction(max : maxAbs, peak, rmax) reduction(min : rmin) \
    reduction(+ : sumSq, bad) schedule(static) if (n > kParallelMin)
  for (long long i = 0; i < n; ++i) {
    const double r = pr[i];
    if (std::isfinite(r)) {
      peak = std::max(peak, std::abs(r));
      rmin = std::min(rmin, r);
      rmax = std::max(rmax, r);
    }
    const double v = pa[i];
    if (!std::isfinite(v)) {
      ++bad;
      continue;
    }
    const double d = std::abs(v - r);
    maxAbs = std::max(maxAbs, d);
    sumSq += d * d;
  }
  ErrorStats s;
  s.nonFinite = bad;
  s.refPeak = peak;
  s.dataRange = range > 0.0 ? range : (rmax > rmin ? rmax - rmin : 1.0);
  if (bad > 0) {
    s.maxAbs = s.maxRel = s.rmse = kInf;
    s.psnr = -kInf;
    return s;
  }
  s.maxAbs = maxAbs;
  s.maxRel = peak > 0.0 ? maxAbs / peak : maxAbs;
  const double mse = sumSq / static_cast<double>(n);
  s.rmse = std::sqrt(mse);
  s.psnr = mse > 0.0 ? 10.0 * std::log10(s.dataRange * s.dataRange / mse) : kInf;
  return s;
}

double maxAbsError(HostImage const& a, HostImage const& ref) { return compare(a, ref).maxAbs; }
double maxRelativeError(HostImage const& a, HostImage const& ref) { return compare(a, ref).maxRel; }
double rmse(HostImage const& a, HostImage const& ref) { return compare(a, ref).rmse; }

double psnr(HostImage const& a, HostImage const& ref, double range) {
  if (!(range > 0.0) || !std::isfinite(range))
    throw InvalidArgument("psnr: the data range must be positive and finite, got " +
                          std::to_string(range));
  return compare(a, ref, range).psnr;
}

double minValue(HostImage const& img) {
  const float* p = img.data.data();
  const long long n = static_cast<long long>(img.data.size());
  double m = kInf;
#pragma omp parallel for reduction(min : m) schedule(static) if (n > kParallelMin)
  for (long long i = 0; i < n; ++i)
    if (std::isfinite(p[i])) m = std::min(m, double(p[i]));
  return m;
}

double maxValue(HostImage const& img) {
  const float* p = img.data.data();
  const long long n = static_cast<long long>(img.data.size());
  double m = -kInf;
#pragma omp parallel for reduction(max : m) schedule(static) if (n > kParallelMin)
  for (long long i = 0; i < n; ++i)
    if (std::isfinite(p[i])) m = std::max(m, double(p[i]));
  return m;
}

double dataRange(HostImage const& img) {
  const double lo = minValue(img), hi = maxValue(img);
  return hi > lo ? hi - lo : 0.0;
}

bool allFinite(HostImage const& img) {
  const float* p = img.data.data();
  const long long n = static_cast<long long>(img.data.size());
  long long bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static) if (n > kParallelMin)
  for (long long i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) ++bad;
  return bad == 0;
}

// SSIM, scikit-image's definition (see the header). The five local moments (E x, E y, E x^2,
// E y^2, E xy) are Gaussian-filtered separably and only on the interior that skimage averages
// over (a 5-voxel border is cropped on every filtered axis), one z-slice at a time; in 3D a
// ring of 11 filtered slices feeds the z pass, so memory stays O(11 slices).
double ssim(HostImage const& a, HostImage const& b, double range) {
  requireSameExtents(a, b, "ssim");
  if (!(range > 0.0) || !std::isfinite(range))
    throw InvalidArgument("ssim: the data range must be positive and finite, got " +
                          std::to_string(range));
  if (!allFinite(a) || !allFinite(b)) return -kInf;
  constexpr int r = SsimWindow::kRadius;
  constexpr int w = 2 * r + 1;
  const long long nz = static_cast<long long>(a.data.extent(0));
  const long long ny = static_cast<long long>(a.data.extent(1));
  const long long nx = static_cast<long long>(a.data.extent(2));
  const bool is3D = nz > 1;
  if (nx < w || ny < w || (is3D && nz < w))
    throw InvalidArgument("ssim: every image extent must be at least " + std::to_string(w) +
                          " (the 11-voxel Gaussian window), got " + std::to_string(nx) + "x" +
                          std::to_string(ny) + (is3D ? "x" + std::to_string(nz) : std::string()));

  // scipy.ndimage's 1D Gaussian kernel: exp(-x^2 / (2 sigma^2)), x = -r..r, normalised.
  double g[w];
  double gs = 0.0;
  for (int t = -r; t <= r; ++t) {
    g[t + r] = std::exp(-0.5 * t * t / (SsimWindow::kSigma * SsimWindow::kSigma));
    gs += g[t + r];
  }
  for (double& v : g) v /= gs;

  const long long nxo = nx - 2 * r, nyo = ny - 2 * r;
  const long long sliceOut = nxo * nyo;
  constexpr int kM = 5;  // moments per voxel
  const float* pa = a.data.data();
  const float* pb = b.data.data();

  // Filters slice k along x (interior columns) and y (interior rows) into out[sliceOut * 5].
  std::vector<double> tmp(static_cast<std::size_t>(ny * nxo * kM));
  const bool par = nx * ny * w > kParallelMin;  // enough work per slice for threads
  (void)par;  // only read by the OpenMP if() clauses
  auto filterSlice = [&](long long k, double* out) {
    const float* sa = pa + k * nx * ny;
    const float* sb = pb + k * nx * ny;
#pragma omp parallel for schedule(static) if (par)
    for (long long j = 0; j < ny; ++j)
      for (long long i = 0; i < nxo; ++i) {
        double m[kM] = {0, 0, 0, 0, 0};
        for (int t = 0; t < w; ++t) {
          const double x = sa[j * nx + i + t], y = sb[j * nx + i + t];
          const double wt = g[t];
          m[0] += wt * x;
          m[1] += wt * y;
          m[2] += wt * x * x;
          m[3] += wt * y * y;
          m[4] += wt * x * y;
        }
        double* dst = &tmp[static_cast<std::size_t>((j * nxo + i) * kM)];
        for (int c = 0; c < kM; ++c) dst[c] = m[c];
      }
#pragma omp parallel for schedule(static) if (par)
    for (long long j = 0; j < nyo; ++j)
      for (long long i = 0; i < nxo; ++i) {
        double m[kM] = {0, 0, 0, 0, 0};
        for (int t = 0; t < w; ++t) {
          const double* src = &tmp[static_cast<std::size_t>(((j + t) * nxo + i) * kM)];
          for (int c = 0; c < kM; ++c) m[c] += g[t] * src[c];
        }
        double* dst = out + (j * nxo + i) * kM;
        for (int c = 0; c < kM; ++c) dst[c] = m[c];
      }
  };

  const double C1 = (SsimWindow::kK1 * range) * (SsimWindow::kK1 * range);
  const double C2 = (SsimWindow::kK2 * range) * (SsimWindow::kK2 * range);
  auto ssimSum = [&](const double* mom) {
    double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (par)
    for (long long q = 0; q < sliceOut; ++q) {
      const double* m = mom + q * kM;
      const double ux = m[0], uy = m[1];
      const double vx = m[2] - ux * ux, vy = m[3] - uy * uy, vxy = m[4] - ux * uy;
      const double A1 = 2.0 * ux * uy + C1, A2 = 2.0 * vxy + C2;
      const double B1 = ux * ux + uy * uy + C1, B2 = vx + vy + C2;
      s += (A1 * A2) / (B1 * B2);
    }
    return s;
  };

  double total = 0.0;
  long long count = 0;
  if (!is3D) {
    std::vector<double> mom(static_cast<std::size_t>(sliceOut * kM));
    filterSlice(0, mom.data());
    total = ssimSum(mom.data());
    count = sliceOut;
  } else {
    std::vector<double> ring(static_cast<std::size_t>(w * sliceOut * kM));
    std::vector<double> mom(static_cast<std::size_t>(sliceOut * kM));
    for (long long k = 0; k < nz; ++k) {
      filterSlice(k, &ring[static_cast<std::size_t>((k % w) * sliceOut * kM)]);
      if (k < w - 1) continue;
      // Output slice kc = k - r uses filtered slices k-2r .. k.
      std::fill(mom.begin(), mom.end(), 0.0);
      for (int t = 0; t < w; ++t) {
        const double* src = &ring[static_cast<std::size_t>(((k - 2 * r + t) % w) * sliceOut * kM)];
        const double wt = g[t];
        double* dst = mom.data();
        const long long len = sliceOut * kM;
#pragma omp parallel for schedule(static) if (par)
        for (long long q = 0; q < len; ++q) dst[q] += wt * src[q];
      }
      total += ssimSum(mom.data());
      count += sliceOut;
    }
  }
  return total / static_cast<double>(count);
}

}  // namespace kortex::validation
