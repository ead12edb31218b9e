// Shared test support: Kokkos initialisation fixture, data-folder lookup, copies and error norms.
// Include after <boost/test/unit_test.hpp> in exactly the test executables.
#pragma once

#include <Kokkos_Core.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <system_error>

#include <unistd.h>

#include "KortexExecSpaces.hpp"
#include "core/Image.hpp"

namespace kortex::test {

struct KokkosFixture {
  KokkosFixture() {
    if (!Kokkos::is_initialized()) Kokkos::initialize();
  }
  ~KokkosFixture() {
    if (Kokkos::is_initialized()) Kokkos::finalize();
  }
};

// ../shared/data (or $KORTEX_DATA_DIR); empty path when absent.
inline std::filesystem::path dataDir() {
  if (const char* env = std::getenv("KORTEX_DATA_DIR")) {
    if (std::filesystem::is_directory(env)) return env;
    return {};
  }
  std::filesystem::path p(KORTEX_TEST_DATA_DIR);
  return std::filesystem::is_directory(p) ? p : std::filesystem::path{};
}

// Prints the ctest skip marker; use as `if (!requireData("...")) return;`.
inline bool requireData(std::string const& sub) {
  auto d = dataDir();
  if (d.empty() || !std::filesystem::exists(d / sub)) {
    std::cout << "KORTEX_SKIP: real data '" << sub
              << "' not found (set KORTEX_DATA_DIR or provide ../shared/data)" << std::endl;
    BOOST_TEST_MESSAGE("skipped: no data " << sub);
    return false;
  }
  return true;
}

template <class Space>
ImageView<typename Space::memory_space> toSpace(HostImage const& h, const char* label) {
  ImageView<typename Space::memory_space> d(std::string(label), h.data.extent(0), h.data.extent(1),
                                            h.data.extent(2));
  Kokkos::deep_copy(d, h.data);
  return d;
}

template <class View>
HostImage toHost(View const& d, Geometry const& g) {
  HostImage h("kortex::test::host", g);
  Kokkos::deep_copy(h.data, d);
  return h;
}

// max |a - b| / max |ref|: error relative to the image's dynamic range (peak of the reference).
inline double maxRelativeError(HostImage const& a, HostImage const& ref) {
  double num = 0.0, den = 0.0;
  const float* pa = a.data.data();
  const float* pr = ref.data.data();
  for (Index i = 0; i < ref.numVoxels(); ++i) {
    if (!std::isfinite(pa[i])) return INFINITY;
    num = std::max(num, std::abs(double(pa[i]) - double(pr[i])));
    den = std::max(den, std::abs(double(pr[i])));
  }
  return den > 0 ? num / den : num;
}

// A fresh temporary folder, removed (with everything in it) at the end of the scope.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(std::string const& prefix) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  TempDir(TempDir const&) = delete;
  TempDir& operator=(TempDir const&) = delete;
  std::filesystem::path operator/(std::string const& n) const { return path / n; }
};

inline double maxAbsDifference(HostImage const& a, HostImage const& b) {
  double m = 0.0;
  for (Index i = 0; i < a.numVoxels(); ++i) {
    const double d = std::abs(double(a.data.data()[i]) - double(b.data.data()[i]));
    if (!std::isfinite(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

// Signed distance to a sphere of radius R centred at (c, c, c), and phi of that sphere on an n^3
// grid centred in it, clean and with Gaussian noise (sd, seed): the surface denoising tests.
inline double sphereDistance(Index x, Index y, Index z, double R, double c) {
  return std::hypot(x - c, y - c, z - c) - R;
}
inline void noisySphere(Index n, double R, double sd, unsigned seed, HostImage& clean, HostImage& noisy) {
  clean = HostImage("kortex::test::clean", Geometry::make3D(n, n, n));
  noisy = HostImage("kortex::test::noisy", clean.geometry);
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, sd);
  const double c = (double(n) - 1.0) / 2.0;
  for (Index z = 0; z < n; ++z)
    for (Index y = 0; y < n; ++y)
      for (Index x = 0; x < n; ++x) {
        const double d = sphereDistance(x, y, z, R, c);
        clean.data(z, y, x) = static_cast<float>(d);
        noisy.data(z, y, x) = static_cast<float>(d + noise(rng));
      }
}

}  // namespace kortex::test

using KortexKokkosFixture = kortex::test::KokkosFixture;
BOOST_TEST_GLOBAL_FIXTURE(KortexKokkosFixture);
