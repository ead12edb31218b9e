// Shared test support: Kokkos initialisation fixture, data-folder lookup, copies, poisoned
// outputs and error norms. Include after <boost/test/unit_test.hpp> in exactly the test executables.
//
// Real data (../shared/data or $KORTEX_DATA_DIR) is read only by the executables built with
// kortex_add_test(... REALDATA) (label `realdata`, compile definition KORTEX_REALDATA_TEST). Such a
// file defines BOOST_TEST_NO_MAIN before including Boost.Test and ends with
// KORTEX_REALDATA_TEST_MAIN(); its cases call `if (!test::requireData("sub/path")) return;`.
// The executable then exits
//   0   every case ran and passed,
//   77  no failure, but at least one case was skipped for want of data (ctest: SKIP_RETURN_CODE),
//   other (Boost.Test's code) on any failure, whether or not other cases were skipped.
// Every other test executable has no skip at all: requireData does not exist there.
#pragma once

#include <Kokkos_Core.hpp>
#include <boost/test/unit_test.hpp>

#include <boost/core/demangle.hpp>

#if defined(KORTEX_REALDATA_TEST)
#include <boost/cstdlib.hpp>  // boost::exit_test_failure
#if !defined(BOOST_TEST_NO_MAIN)
#error "a realdata test defines BOOST_TEST_NO_MAIN before including Boost.Test and ends with KORTEX_REALDATA_TEST_MAIN()"
#endif
#if !defined(BOOST_TEST_DYN_LINK)
// The static Boost.Test library defines main() in the object file that also defines
// unit_test_main(): a main of our own that calls unit_test_main() would be a second definition.
// Static builds (the `cuda` preset) therefore compile Boost.Test into this one translation unit
// (the header-only variant; BOOST_TEST_NO_MAIN keeps its main out), and nothing is taken from the
// static library.
#include <boost/test/included/unit_test.hpp>
#endif
#endif

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include <unistd.h>

#include "KortexExecSpaces.hpp"
#include "core/Bilateral.hpp"
#include "core/Image.hpp"
#include "core/Nlm.hpp"

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

#if defined(KORTEX_REALDATA_TEST)
// The test cases (by id) that called requireData without finding their data.
inline std::set<boost::unit_test::test_unit_id>& skippedCases() {
  static std::set<boost::unit_test::test_unit_id> ids;
  return ids;
}

// true when dataDir()/sub exists; otherwise prints a note, counts the running case as skipped
// and returns false. Use as `if (!test::requireData("...")) return;` at the top of a case (or of
// the part of it that reads the file). Only in realdata executables (see the top of this file).
inline bool requireData(std::string const& sub) {
  auto d = dataDir();
  if (!d.empty() && std::filesystem::exists(d / sub)) return true;
  auto const& tc = boost::unit_test::framework::current_test_case();
  std::cout << "skipped: real data '" << sub
            << "' not found (set KORTEX_DATA_DIR or provide ../shared/data) [" << tc.full_name()
            << "]" << std::endl;
  BOOST_TEST_MESSAGE("skipped: no data " << sub);
  skippedCases().insert(tc.p_id);
  return false;
}

// Runs the Boost.Test module and maps "passed, but something skipped" to 77; any failure keeps
// Boost.Test's own (non-zero, non-77) code.
inline int realDataTestMain(boost::unit_test::init_unit_test_func init, int argc, char* argv[]) {
  const int rc = boost::unit_test::unit_test_main(init, argc, argv);
  const std::size_t skipped = skippedCases().size();
  if (rc != 0 || skipped == 0) return rc == 77 ? boost::exit_test_failure : rc;
  std::cout << skipped << " test case(s) skipped for want of real data: exit code 77 (ctest: Skipped)"
            << std::endl;
  return 77;
}
#endif

// Host image -> image View in Space's memory. The label is handed to Kokkos as a std::string
// (Kokkos 3.4's View constructor does not take every `const char*`).
template <class Space>
ImageView<typename Space::memory_space> toSpace(HostImage const& h,
                                                std::string const& label = "kortex::test::in") {
  ImageView<typename Space::memory_space> d(label, h.data.extent(0), h.data.extent(1),
                                            h.data.extent(2));
  Kokkos::deep_copy(d, h.data);
  return d;
}

// Device view -> host image (or another host type built from a label and a Geometry with a
// `data` view, e.g. HostField: toHost<HostField>(d, g)).
template <class Host = HostImage, class View>
Host toHost(View const& d, Geometry const& g) {
  Host h("kortex::test::host", g);
  Kokkos::deep_copy(h.data, d);
  return h;
}

// Poisoned output: `v` filled with `poison` before a kernel writes it, so that an element the
// kernel never writes keeps a value the kernel cannot produce. Returns v.
template <class View>
View poisoned(View v, typename View::non_const_value_type poison) {
  Kokkos::deep_copy(v, poison);
  return v;
}
// ... with NaN (floating-point views; integer views name their sentinel).
template <class View>
View poisoned(View v) {
  using T = typename View::non_const_value_type;
  static_assert(std::is_floating_point<T>::value, "name a sentinel for an integer view");
  return poisoned(v, std::numeric_limits<T>::quiet_NaN());
}
// A NaN-poisoned image View in Space's memory on the grid of g.
template <class Space>
ImageView<typename Space::memory_space> poisonedImage(Geometry const& g,
                                                      std::string const& label = "kortex::test::out") {
  return poisoned(ImageView<typename Space::memory_space>(label, g.nz(), g.ny(), g.nx()));
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

// Filter parameters in one line (variant: the params struct's default unless given).
inline BilateralParams bilateralParams(int radius, float sigmaS, float sigmaR,
                                       BilateralVariant v = BilateralParams{}.variant) {
  BilateralParams p;
  p.radius = radius;
  p.sigmaSpatial = sigmaS;
  p.sigmaRange = sigmaR;
  p.variant = v;
  return p;
}
inline NlmParams nlmParams(int patchRadius, int searchRadius, float h, NlmVariant v = NlmParams{}.variant) {
  NlmParams p;
  p.patchRadius = patchRadius;
  p.searchRadius = searchRadius;
  p.h = h;
  p.variant = v;
  return p;
}

// Runs f and expects an exception of type E whose message contains every fragment; anything
// else (nothing thrown, another type, a fragment missing) is a test error naming what happened.
template <class E, class F>
void expectThrowWith(F&& f, std::vector<std::string> const& fragments) {
  const std::string name = boost::core::demangle(typeid(E).name());
  try {
    f();
    BOOST_ERROR("expected " << name << ", nothing was thrown");
  } catch (E const& e) {
    const std::string msg = e.what();
    for (auto const& frag : fragments)
      BOOST_TEST(msg.find(frag) != std::string::npos, "'" << frag << "' not in: " << msg);
  } catch (std::exception const& e) {
    BOOST_ERROR("expected " << name << ", got: " << e.what());
  }
}

}  // namespace kortex::test

using KortexKokkosFixture = kortex::test::KokkosFixture;
BOOST_TEST_GLOBAL_FIXTURE(KortexKokkosFixture);

#if defined(KORTEX_REALDATA_TEST)
// main() of a realdata test executable (exit codes at the top of this file). The init function
// is the one BOOST_TEST_MODULE defines: `bool init_unit_test()` with the shared library
// (BOOST_TEST_DYN_LINK, hence BOOST_TEST_ALTERNATIVE_INIT_API), `test_suite*
// init_unit_test_suite(int, char*[])` otherwise.
#if defined(BOOST_TEST_ALTERNATIVE_INIT_API)
#define KORTEX_REALDATA_TEST_MAIN()                                        \
  int main(int argc, char* argv[]) {                                       \
    return ::kortex::test::realDataTestMain(&init_unit_test, argc, argv);  \
  }
#else
#define KORTEX_REALDATA_TEST_MAIN()                                              \
  int main(int argc, char* argv[]) {                                             \
    return ::kortex::test::realDataTestMain(&init_unit_test_suite, argc, argv);  \
  }
#endif
#endif
