// Device memory bound of the issue: no variant allocates more than ~3x (input + output).
// Kokkos' tools allocation callbacks count the bytes allocated in any space while a filter runs
// (input and output are allocated before), on every enabled execution space.
#define BOOST_TEST_MODULE Memory
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Phantom.hpp"
#include "gpu/bilateral/Bilateral.hpp"
#include "gpu/nlm/Nlm.hpp"

#include <cstdint>
#include <string>

using namespace kortex;

namespace {
std::int64_t gLive = 0;
std::int64_t gPeak = 0;
// Host backends (Serial, OpenMP) back team scratch with a per-thread pool that Kokkos allocates
// under the label "Kokkos::<Space>::scratch_mem" and keeps: its size depends on the thread count
// and the team scratch a kernel asks for, not on the image. Counted apart.
std::int64_t gScratchLive = 0;
std::int64_t gScratchPeak = 0;

bool isHostScratchPool(const char* label) {
  return std::string(label).find("::scratch_mem") != std::string::npos;
}
void onAllocate(Kokkos::Tools::SpaceHandle, const char* label, const void*, const std::uint64_t size) {
  if (isHostScratchPool(label)) {
    gScratchLive += static_cast<std::int64_t>(size);
    gScratchPeak = std::max(gScratchPeak, gScratchLive);
    return;
  }
  gLive += static_cast<std::int64_t>(size);
  gPeak = std::max(gPeak, gLive);
}
void onDeallocate(Kokkos::Tools::SpaceHandle, const char* label, const void*, const std::uint64_t size) {
  if (isHostScratchPool(label)) {
    gScratchLive -= static_cast<std::int64_t>(size);
    return;
  }
  gLive -= static_cast<std::int64_t>(size);
}

// Extra device memory a filter call may allocate: 2 x (input + output), so that with the
// caller's input and output the total stays within 3 x (input + output).
constexpr double kMaxExtraFactor = 2.0;
// Host scratch pool per thread beyond the level-0 team scratch limit: Kokkos' per-thread
// reduction buffers and alignment (measured: 14.9 KB per thread for NLM BoxSum on OpenMP).
constexpr double kHostScratchSlackPerThread = 64.0 * 1024.0;

template <class Space, class Run>
void checkBound(std::string const& what, Geometry const& g, Run&& run) {
  auto img = randomImage(g, 7);
  auto in = test::toSpace<Space>(img, "kortex::test::memory::in");
  ImageView<typename Space::memory_space> out("kortex::test::memory::out", g.nz(), g.ny(), g.nx());
  Space exec;
  exec.fence();
  gLive = 0;
  gPeak = 0;
  gScratchPeak = gScratchLive = 0;
  run(exec, ConstImageView<typename Space::memory_space>(in), out);
  exec.fence();
  const double scratchPool =
      static_cast<double>(kx::concurrency(exec)) *
      (static_cast<double>(kx::scratchSizeMax<Kokkos::TeamPolicy<Space>>(0)) + kHostScratchSlackPerThread);
  BOOST_TEST_INFO(what << " on " << Space::name() << ": host scratch pool " << gScratchPeak << " B");
  BOOST_TEST(static_cast<double>(gScratchPeak) <= scratchPool);
  const double inOut = 2.0 * static_cast<double>(g.numVoxels()) * sizeof(float);
  BOOST_TEST_INFO(what << " on " << Space::name() << ": peak extra " << gPeak << " B, in+out "
                       << inOut << " B");
  BOOST_TEST(static_cast<double>(gPeak) <= kMaxExtraFactor * inOut);
}
}  // namespace

BOOST_AUTO_TEST_CASE(callbacks_see_allocations) {
  // The check below is meaningful only if the callbacks fire: allocate and watch.
  Kokkos::Tools::Experimental::set_allocate_data_callback(&onAllocate);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(&onDeallocate);
  gLive = gPeak = 0;
  { Kokkos::View<float*> v("kortex::test::memory::probe", 1000); }
  BOOST_TEST(gPeak >= 4000);
  BOOST_TEST(gLive == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(variants_stay_within_bound, Space, test::ExecutionSpaces) {
  Kokkos::Tools::Experimental::set_allocate_data_callback(&onAllocate);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(&onDeallocate);
  for (auto const& g : {Geometry::make2D(97, 61), Geometry::make3D(29, 23, 17)}) {
    for (auto v : {BilateralVariant::Naive, BilateralVariant::ScratchTiled}) {
      BilateralParams p;
      p.radius = 3;
      p.variant = v;
      checkBound<Space>(std::string("bilateral ") + toString(v), g,
                        [&](auto const& e, auto in, auto out) { gpu::bilateral(e, in, out, p); });
    }
    for (auto v : {NlmVariant::Naive, NlmVariant::ScratchTiled, NlmVariant::BoxSum}) {
      NlmParams p;
      p.patchRadius = 2;
      p.searchRadius = 3;
      p.variant = v;
      checkBound<Space>(std::string("nlm ") + toString(v), g,
                        [&](auto const& e, auto in, auto out) { gpu::nlm(e, in, out, p); });
    }
  }
}
