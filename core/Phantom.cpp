#include "core/Phantom.hpp"

#include <cmath>
#include <vector>

namespace kortex {

double SplitMix64::normal() {
  // Box-Muller; u1 in (0,1] so log is finite.
  const double u1 = 1.0 - uniform();
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

namespace {
struct Ellipse2D { double value, a, b, x0, y0, phiDeg; };
// Modified Shepp-Logan (Toft 1996), as in scikit-image / MATLAB phantom('Modified Shepp-Logan').
const Ellipse2D kSheppLogan2D[] = {
    {1.0, 0.69, 0.92, 0.0, 0.0, 0.0},        {-0.8, 0.6624, 0.8740, 0.0, -0.0184, 0.0},
    {-0.2, 0.11, 0.31, 0.22, 0.0, -18.0},    {-0.2, 0.16, 0.41, -0.22, 0.0, 18.0},
    {0.1, 0.21, 0.25, 0.0, 0.35, 0.0},       {0.1, 0.046, 0.046, 0.0, 0.1, 0.0},
    {0.1, 0.046, 0.046, 0.0, -0.1, 0.0},     {0.1, 0.046, 0.023, -0.08, -0.605, 0.0},
    {0.1, 0.023, 0.023, 0.0, -0.606, 0.0},   {0.1, 0.023, 0.046, 0.06, -0.605, 0.0}};

struct Ellipsoid { double value, a, b, c, x0, y0, z0, phiDeg; };
// Kak-Slaney 3D Shepp-Logan geometry with the modified (Toft) intensities.
const Ellipsoid kSheppLogan3D[] = {
    {1.0, 0.69, 0.92, 0.90, 0.0, 0.0, 0.0, 0.0},
    {-0.8, 0.6624, 0.874, 0.88, 0.0, 0.0, 0.0, 0.0},
    {-0.2, 0.41, 0.16, 0.21, -0.22, 0.0, -0.25, 108.0},
    {-0.2, 0.31, 0.11, 0.22, 0.22, 0.0, -0.25, 72.0},
    {0.1, 0.21, 0.25, 0.5, 0.0, 0.35, -0.25, 0.0},
    {0.1, 0.046, 0.046, 0.046, 0.0, 0.1, -0.25, 0.0},
    {0.1, 0.046, 0.023, 0.02, -0.08, -0.65, -0.25, 0.0},
    {0.1, 0.046, 0.023, 0.02, 0.06, -0.65, -0.25, 90.0},
    {0.1, 0.056, 0.04, 0.1, 0.06, -0.105, 0.625, 90.0},
    {-0.1, 0.056, 0.056, 0.1, 0.0, 0.1, 0.625, 0.0}};
}  // namespace

HostImage sheppLogan2D(Index n) {
  HostImage img("kortex::Phantom::sheppLogan2D", Geometry::make2D(n, n));
  for (Index j = 0; j < n; ++j)
    for (Index i = 0; i < n; ++i) {
      // Image row 0 is the top (y = +1), as in the usual rendering.
      const double x = (2.0 * i + 1.0) / n - 1.0;
      const double y = 1.0 - (2.0 * j + 1.0) / n;
      double v = 0.0;
      for (auto const& e : kSheppLogan2D) {
        const double phi = e.phiDeg * M_PI / 180.0;
        const double c = std::cos(phi), s = std::sin(phi);
        const double xr = (x - e.x0) * c + (y - e.y0) * s;
        const double yr = -(x - e.x0) * s + (y - e.y0) * c;
        if ((xr * xr) / (e.a * e.a) + (yr * yr) / (e.b * e.b) <= 1.0) v += e.value;
      }
      img.data(0, j, i) = static_cast<float>(v);
    }
  return img;
}

HostImage sheppLogan3D(Index n) {
  HostImage img("kortex::Phantom::sheppLogan3D", Geometry::make3D(n, n, n));
  for (Index k = 0; k < n; ++k)
    for (Index j = 0; j < n; ++j)
      for (Index i = 0; i < n; ++i) {
        const double x = (2.0 * i + 1.0) / n - 1.0;
        const double y = 1.0 - (2.0 * j + 1.0) / n;
        const double z = (2.0 * k + 1.0) / n - 1.0;
        double v = 0.0;
        for (auto const& e : kSheppLogan3D) {
          const double phi = e.phiDeg * M_PI / 180.0;
          const double c = std::cos(phi), s = std::sin(phi);
          const double xr = (x - e.x0) * c + (y - e.y0) * s;
          const double yr = -(x - e.x0) * s + (y - e.y0) * c;
          const double zr = z - e.z0;
          if (xr * xr / (e.a * e.a) + yr * yr / (e.b * e.b) + zr * zr / (e.c * e.c) <= 1.0)
            v += e.value;
        }
        img.data(k, j, i) = static_cast<float>(v);
      }
  return img;
}

HostImage randomImage(Geometry const& g, std::uint64_t seed, float lo, float hi) {
  HostImage img("kortex::Phantom::random", g);
  SplitMix64 rng(seed);
  float* p = img.data.data();
  for (Index i = 0; i < g.numVoxels(); ++i)
    p[i] = lo + static_cast<float>(rng.uniform()) * (hi - lo);
  return img;
}

HostImage structuredImage(Geometry const& g, std::uint64_t seed) {
  HostImage img("kortex::Phantom::structured", g);
  SplitMix64 rng(seed);
  // Block size 7 (odd, not a tile multiple) with random levels, plus a gentle ramp.
  const Index b = 7;
  const Index bx = (g.nx() + b - 1) / b, by = (g.ny() + b - 1) / b, bz = (g.nz() + b - 1) / b;
  std::vector<float> levels(static_cast<std::size_t>(bx * by * bz));
  for (auto& l : levels) l = static_cast<float>(rng.uniform());
  for (Index k = 0; k < g.nz(); ++k)
    for (Index j = 0; j < g.ny(); ++j)
      for (Index i = 0; i < g.nx(); ++i) {
        const float level = levels[static_cast<std::size_t>(((k / b) * by + j / b) * bx + i / b)];
        img.data(k, j, i) = 0.7f * level + 0.3f * static_cast<float>(i + j + k) /
                                               static_cast<float>(g.nx() + g.ny() + g.nz());
      }
  return img;
}

double meanValue(HostImage const& img) {
  const float* p = img.data.data();
  double s = 0.0;
  for (Index i = 0; i < img.numVoxels(); ++i) s += p[i];
  return s / static_cast<double>(img.numVoxels());
}

HostImage addGaussianNoise(HostImage const& img, double sigma, std::uint64_t seed) {
  HostImage out("kortex::Phantom::noisy", img.geometry);
  out.metadata = img.metadata;
  SplitMix64 rng(seed);
  const float* p = img.data.data();
  float* q = out.data.data();
  for (Index i = 0; i < img.numVoxels(); ++i)
    q[i] = static_cast<float>(p[i] + sigma * rng.normal());
  return out;
}

double noiseSigmaForSnr(HostImage const& img, double snr) {
  if (!(snr > 0.0)) throw InvalidArgument("SNR must be positive");
  return meanValue(img) / snr;
}

}  // namespace kortex
