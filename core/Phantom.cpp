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

HostImage sphereDistance(Geometry const& g, double radius) {
  HostImage img("kortex::Phantom::sphereDistance", g);
  const double cx = 0.5 * double(g.nx() - 1), cy = 0.5 * double(g.ny() - 1), cz = 0.5 * double(g.nz() - 1);
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x)
        img.data(z, y, x) = static_cast<float>(std::hypot(double(x) - cx, double(y) - cy, double(z) - cz) - radius);
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

VectorField<Kokkos::HostSpace> smoothDisplacement(Geometry const& g, double maxVoxels, std::uint64_t seed) {
  g.validate();
  if (!(maxVoxels >= 0.0) || !std::isfinite(maxVoxels))
    throw InvalidArgument("smoothDisplacement: amplitude must be finite and >= 0");
  VectorField<Kokkos::HostSpace> u("kortex::smoothDisplacement", g, 3);
  const Index nx = g.nx(), ny = g.ny(), nz = g.nz();
  SplitMix64 rng(seed);
  const double twoPi = 6.283185307179586;
  double k[3][3], phase[3][3];
  for (int c = 0; c < 3; ++c)
    for (int a = 0; a < 3; ++a) {
      const double extent = static_cast<double>(g.size[a]);
      k[c][a] = twoPi / (extent * (0.8 + 0.8 * rng.uniform()));
      phase[c][a] = twoPi * rng.uniform();
    }
  double peak = 0.0;
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        double n2 = 0.0;
        for (int c = 0; c < 3; ++c) {
          const double v = std::sin(k[c][0] * x + phase[c][0]) * std::sin(k[c][1] * y + phase[c][1]) *
                           std::sin(k[c][2] * z + phase[c][2]);
          u.data(c, z, y, x) = static_cast<float>(v);
          n2 += v * v;
        }
        peak = std::max(peak, std::sqrt(n2));
      }
  double scale = peak > 0.0 ? maxVoxels / peak : 0.0;
  // Largest Frobenius norm of grad u for the unit-scaled field (clamped central differences).
  auto cl = [](Index i, Index n) { return i < 0 ? Index(0) : (i >= n ? n - 1 : i); };
  double gradPeak = 0.0;
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        double f2 = 0.0;
        for (int c = 0; c < 3; ++c) {
          const double dx = 0.5 * (u.data(c, z, y, cl(x + 1, nx)) - u.data(c, z, y, cl(x - 1, nx)));
          const double dy = 0.5 * (u.data(c, z, cl(y + 1, ny), x) - u.data(c, z, cl(y - 1, ny), x));
          const double dz = 0.5 * (u.data(c, cl(z + 1, nz), y, x) - u.data(c, cl(z - 1, nz), y, x));
          f2 += dx * dx + dy * dy + dz * dz;
        }
        gradPeak = std::max(gradPeak, std::sqrt(f2));
      }
  if (gradPeak * scale > 0.5) scale = 0.5 / gradPeak;
  float* p = u.data.data();
  for (std::size_t i = 0; i < u.data.size(); ++i) p[i] = static_cast<float>(p[i] * scale);
  return u;
}

}  // namespace kortex
