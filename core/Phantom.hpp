// Embedded test images (no files needed): Shepp-Logan phantoms in 2D/3D, deterministic
// random images, and additive Gaussian noise at a given SNR (mean pixel value / noise std,
// the paper's definition).
#pragma once

#include <cstdint>

#include "core/Image.hpp"

namespace kortex {

// Modified Shepp-Logan (Toft) in [0, 1], n x n.
HostImage sheppLogan2D(Index n);
// 3D Shepp-Logan (Kak-Slaney ellipsoids, modified intensities) in [0, 1], n^3.
HostImage sheppLogan3D(Index n);
// Uniform random values in [lo, hi) from a seeded 64-bit generator (same on every platform).
HostImage randomImage(Geometry const& g, std::uint64_t seed, float lo = 0.0f, float hi = 1.0f);
// Piecewise-constant blocks + a ramp: structured content with edges at odd positions.
HostImage structuredImage(Geometry const& g, std::uint64_t seed);
// Signed distance (voxels, negative inside) to a sphere of `radius` voxels centred in the 3D grid g:
// the surface denoising's phi (add noise with addGaussianNoise).
HostImage sphereDistance(Geometry const& g, double radius);

// Mean voxel value (for the SNR definition).
double meanValue(HostImage const& img);
// Returns img + N(0, sigma^2) i.i.d. (platform-independent generator).
HostImage addGaussianNoise(HostImage const& img, double sigma, std::uint64_t seed);
// sigma such that mean(img) / sigma == snr.
double noiseSigmaForSnr(HostImage const& img, double snr);

// A smooth diffeomorphic displacement on grid g, voxel units, layout of core/Registration.hpp
// (3, nz, ny, nx), component 0 = x: per component a product of one low-frequency sine per axis
// (wavelengths 0.8-1.6x the extent, random phases, seeded), scaled so that max_x |u(x)| equals
// maxVoxels, then scaled down if needed until the Frobenius norm of grad u (central differences)
// stays <= 0.5 everywhere, so det(I - grad u) > 0 and h(x) = x - u(x) is invertible. Returns the
// field; the amplitude actually used is max |u| (<= maxVoxels).
VectorField<Kokkos::HostSpace> smoothDisplacement(Geometry const& g, double maxVoxels, std::uint64_t seed);

// Small deterministic generator (splitmix64) so results do not depend on the std library.
struct SplitMix64 {
  std::uint64_t state;
  explicit SplitMix64(std::uint64_t seed) : state(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0,1)
  double normal();                                                          // N(0,1)
};

}  // namespace kortex
