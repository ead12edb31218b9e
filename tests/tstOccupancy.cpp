// Occupancy model (core/Occupancy.hpp): the paper's Table 1 on the GTX 480 (Lee et al., Sec. 2.1),
// sm_90 cases worked out from NVIDIA's occupancy rules (register units of 256 per warp, warps in
// groups of 4, shared memory in units of 128 B plus a 1 KB reserve per block, 48 KB per block
// without opt-in), input validation; and, where CUDA is enabled, the real resources of small
// Kokkos kernels (gpu/Resources.hpp) fed to the model must give the blocks per SM that
// cudaOccupancyMaxActiveBlocksPerMultiprocessor gives for the same kernel.
#define BOOST_TEST_MODULE Occupancy
#include <boost/test/unit_test.hpp>

#include "TestUtils.hpp"
#include "core/Errors.hpp"
#include "core/Occupancy.hpp"
#include "gpu/Resources.hpp"

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <type_traits>

using namespace kortex;

namespace {

KernelResources kernel(int threads, int registers, std::int64_t sharedBytes = 0,
                       std::int64_t localBytes = 0, bool optIn = false) {
  KernelResources k;
  k.threadsPerBlock = threads;
  k.registersPerThread = registers;
  k.staticSharedBytes = sharedBytes;
  k.localBytesPerThread = localBytes;
  k.sharedMemOptIn = optIn;
  return k;
}

}  // namespace

// --- The paper's Table 1 (GTX 480, compute 2.0) ----------------------------------------------

BOOST_AUTO_TEST_CASE(paper_table1_gtx480) {
  const auto gtx480 = DeviceLimits::geforceGtx480();
  struct Row {
    const char* name;
    int registers;
    std::int64_t shared, local;
    int blockX, blockY;
    int blocksPerSm;
    OccupancyLimit limiter;
  };
  const Row rows[] = {
      // recompute-registers: 63 registers, 8640 B shared, 664 B local, block 32x16.
      {"recompute-registers", 63, 8640, 664, 32, 16, 1, OccupancyLimit::Registers},
      // recompute-local-memory: 35 registers, 4364 B shared, 20160 B local, block 32x10.
      {"recompute-local-memory", 35, 4364, 20160, 32, 10, 2, OccupancyLimit::Registers},
      // reuse: 24 registers, 49152 B shared, 2921 B local, block 32x16.
      {"reuse", 24, 49152, 2921, 32, 16, 1, OccupancyLimit::SharedMemory},
  };
  for (auto const& row : rows) {
    BOOST_TEST_CONTEXT(row.name) {
      const auto r = occupancy(gtx480, kernel(row.blockX * row.blockY, row.registers, row.shared,
                                              row.local));
      BOOST_TEST(r.blocksPerSm == row.blocksPerSm);
      BOOST_TEST(r.limiter == row.limiter);
      BOOST_TEST(r.warpsPerBlock == row.blockX * row.blockY / 32);
      // Local memory lives in device memory: it never changes the count.
      const auto noLocal =
          occupancy(gtx480, kernel(row.blockX * row.blockY, row.registers, row.shared, 0));
      BOOST_TEST(noLocal.blocksPerSm == r.blocksPerSm);
    }
  }
  // The intermediate quantities of the first row: 63 x 32 = 2016 registers per warp rounded up to
  // the 64-register unit, 16 warps, 8640 B rounded up to 128 B.
  const auto r = occupancy(gtx480, kernel(512, 63, 8640));
  BOOST_TEST(r.registersPerWarp == 2048);
  BOOST_TEST(r.registersPerBlock == 32768);
  BOOST_TEST(r.sharedBytesPerBlock == 8704);
  BOOST_TEST(r.blocksLimitedByWarps == 3);
  BOOST_TEST(r.blocksLimitedByRegisters == 1);
  BOOST_TEST(r.blocksLimitedBySharedMemory == 5);
  BOOST_TEST(r.blocksLimitedByBlocksPerSm == 8);
  BOOST_TEST(r.activeThreadsPerSm == 512);
  BOOST_TEST(r.occupancy == 16.0 / 48.0, boost::test_tools::tolerance(1e-12));
  // Row 2: 35 x 32 = 1120 -> 1152 per warp; 32768 / 1152 = 28.4 warps, in pairs -> 28 -> 2 blocks.
  const auto r2 = occupancy(gtx480, kernel(320, 35, 4364));
  BOOST_TEST(r2.registersPerWarp == 1152);
  BOOST_TEST(r2.blocksLimitedByRegisters == 2);
  BOOST_TEST(r2.blocksLimitedByWarps == 4);
  BOOST_TEST(r2.blocksLimitedBySharedMemory == 10);
  // Compute 2.0 allows 63 registers per thread, not 64.
  BOOST_CHECK_THROW(occupancy(gtx480, kernel(512, 64)), InvalidArgument);
}

// --- sm_90 (H100 / H200) ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(sm90_registers_and_warps) {
  for (auto const& h : {DeviceLimits::h100Sxm(), DeviceLimits::h200()}) {
    BOOST_TEST_CONTEXT(h.name) {
      // 256 threads, 32 registers: 8 blocks = 64 warps = 100%, warps and registers both at 8.
      auto r = occupancy(h, kernel(256, 32));
      BOOST_TEST(r.blocksPerSm == 8);
      BOOST_TEST(r.occupancy == 1.0, boost::test_tools::tolerance(1e-12));
      BOOST_TEST(r.limiter == OccupancyLimit::Warps);
      BOOST_TEST(r.binds(OccupancyLimit::Warps));
      BOOST_TEST(r.binds(OccupancyLimit::Registers));
      BOOST_TEST(!r.binds(OccupancyLimit::SharedMemory));
      BOOST_TEST(r.sharedBytesPerBlock == 1024);  // nothing requested: the driver's reserve
      BOOST_TEST(r.blocksLimitedBySharedMemory == 228);
      // 64 registers: 2048 per warp, 32 warps -> 4 blocks, 50%.
      r = occupancy(h, kernel(256, 64));
      BOOST_TEST(r.blocksPerSm == 4);
      BOOST_TEST(r.limiter == OccupancyLimit::Registers);
      BOOST_TEST(r.occupancy == 0.5, boost::test_tools::tolerance(1e-12));
      // 255 registers: 8160 -> 8192 per warp, 8 warps -> 1 block of 256.
      r = occupancy(h, kernel(256, 255));
      BOOST_TEST(r.blocksPerSm == 1);
      BOOST_TEST(r.registersPerWarp == 8192);
      BOOST_TEST(r.registersPerBlock == 65536);
      BOOST_TEST(r.limiter == OccupancyLimit::Registers);
      // Allocation unit of 256 registers per warp: 33 and 40 registers both take 1280 per warp.
      BOOST_TEST(occupancy(h, kernel(256, 33)).blocksPerSm == 6);
      BOOST_TEST(occupancy(h, kernel(256, 40)).blocksPerSm == 6);
      // Warps counted in groups of 4: 65536 / 1280 = 51.2 warps -> 48, i.e. 16 blocks of 3 warps
      // (17 without the granularity).
      BOOST_TEST(occupancy(h, kernel(96, 40)).blocksLimitedByRegisters == 16);
      // 1024 threads of 64 registers fill the register file exactly: 1 block.
      BOOST_TEST(occupancy(h, kernel(1024, 64)).blocksPerSm == 1);
      // No registers: no register limit (reported as the block limit, never binding).
      r = occupancy(h, kernel(256, 0));
      BOOST_TEST(r.blocksPerSm == 8);
      BOOST_TEST(!r.binds(OccupancyLimit::Registers));
      // One-warp blocks hit the 32 blocks/SM cap: 50%.
      r = occupancy(h, kernel(32, 16));
      BOOST_TEST(r.blocksPerSm == 32);
      BOOST_TEST(r.limiter == OccupancyLimit::BlocksPerSm);
      BOOST_TEST(r.blocksLimitedByWarps == 64);
      BOOST_TEST(r.occupancy == 0.5, boost::test_tools::tolerance(1e-12));
      // Partial warps count as whole warps: 33 threads take 2 warps.
      BOOST_TEST(occupancy(h, kernel(33, 16)).warpsPerBlock == 2);
    }
  }
}

BOOST_AUTO_TEST_CASE(sm90_cannot_launch) {
  const auto h = DeviceLimits::h100Sxm();
  // 255 registers x 9 warps: the per-block register check rounds 9 warps up to 12 -> 98304 > 64K.
  auto r = occupancy(h, kernel(288, 255));
  BOOST_TEST(r.blocksPerSm == 0);
  BOOST_TEST(r.limiter == OccupancyLimit::Registers);
  BOOST_TEST(!r.reason.empty());
  BOOST_TEST(describe(r).find("cannot launch") != std::string::npos);
  // 1024 threads of 72 registers: 2304 x 32 = 73728 > 64K.
  BOOST_TEST(occupancy(h, kernel(1024, 72)).blocksPerSm == 0);
}

BOOST_AUTO_TEST_CASE(sm90_shared_memory) {
  const auto h = DeviceLimits::h200();
  // 45 KB per block: 228 KB / 46 KB = 4 blocks; without the 1 KB reserve it would be 5.
  auto r = occupancy(h, kernel(128, 32, 45 * 1024));
  BOOST_TEST(r.sharedBytesPerBlock == 46 * 1024);
  BOOST_TEST(r.blocksPerSm == 4);
  BOOST_TEST(r.limiter == OccupancyLimit::SharedMemory);
  // Allocation unit of 128 B: 1 B of shared memory takes 128 B besides the reserve.
  BOOST_TEST(occupancy(h, kernel(128, 32, 1)).sharedBytesPerBlock == 1024 + 128);
  // Dynamic and static shared memory add up.
  KernelResources k = kernel(128, 32, 20 * 1024);
  k.dynamicSharedBytes = 25 * 1024;
  BOOST_TEST(occupancy(h, k).sharedBytesPerBlock == 46 * 1024);
  BOOST_TEST(occupancy(h, k).blocksPerSm == 4);
  // 48 KB is the most a block may use without opt-in; one byte more cannot launch.
  BOOST_TEST(occupancy(h, kernel(128, 32, 48 * 1024)).blocksPerSm == 4);  // 228 / 49 KB
  r = occupancy(h, kernel(128, 32, 48 * 1024 + 1));
  BOOST_TEST(r.blocksPerSm == 0);
  BOOST_TEST(r.limiter == OccupancyLimit::SharedMemory);
  BOOST_TEST(r.reason.find("without opt-in") != std::string::npos);
  // With opt-in: 100 KB -> 2 blocks (2 x 101 KB <= 228 KB), 227 KB -> 1, 227 KB + 1 B -> 0.
  BOOST_TEST(occupancy(h, kernel(128, 32, 100 * 1024, 0, true)).blocksPerSm == 2);
  r = occupancy(h, kernel(128, 32, 227 * 1024, 0, true));
  BOOST_TEST(r.blocksPerSm == 1);
  BOOST_TEST(r.sharedBytesPerBlock == 228 * 1024);
  BOOST_TEST(occupancy(h, kernel(128, 32, 227 * 1024 + 1, 0, true)).blocksPerSm == 0);
  // Shared memory and registers interact: 64 registers (4 blocks of 256) vs 60 KB (3 blocks).
  r = occupancy(h, kernel(256, 64, 60 * 1024, 0, true));
  BOOST_TEST(r.blocksPerSm == 3);
  BOOST_TEST(r.blocksLimitedByRegisters == 4);
  BOOST_TEST(r.limiter == OccupancyLimit::SharedMemory);
}

BOOST_AUTO_TEST_CASE(presets_match_published_limits) {
  // CUDA C++ Programming Guide, Tables 30-31, compute capability 9.0.
  for (auto const& h : {DeviceLimits::h100Sxm(), DeviceLimits::h200()}) {
    BOOST_TEST(h.computeCapability == 90);
    BOOST_TEST(h.smCount == 132);
    BOOST_TEST(h.maxThreadsPerSm == 2048);
    BOOST_TEST(h.maxWarpsPerSm == 64);
    BOOST_TEST(h.maxBlocksPerSm == 32);
    BOOST_TEST(h.registersPerSm == 65536);
    BOOST_TEST(h.maxRegistersPerThread == 255);
    BOOST_TEST(h.sharedMemPerSm == 228 * 1024);
    BOOST_TEST(h.sharedMemPerBlockMax == 227 * 1024);
    BOOST_TEST(h.reservedSharedMemPerBlock == 1024);
    BOOST_CHECK_NO_THROW(validate(h));
  }
  BOOST_CHECK_NO_THROW(validate(DeviceLimits::geforceGtx480()));
}

BOOST_AUTO_TEST_CASE(describe_names_the_limits) {
  const auto s = describe(occupancy(DeviceLimits::h100Sxm(), kernel(256, 32)));
  BOOST_TEST(s.find("8 blocks/SM") != std::string::npos);
  BOOST_TEST(s.find("100.0%") != std::string::npos);
  BOOST_TEST(s.find("warps, registers") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_inputs_rejected) {
  const auto h = DeviceLimits::h100Sxm();
  BOOST_CHECK_THROW(occupancy(h, kernel(0, 32)), InvalidArgument);
  BOOST_CHECK_THROW(occupancy(h, kernel(-32, 32)), InvalidArgument);
  BOOST_CHECK_THROW(occupancy(h, kernel(1025, 32)), InvalidArgument);
  BOOST_CHECK_THROW(occupancy(h, kernel(256, -1)), InvalidArgument);
  BOOST_CHECK_THROW(occupancy(h, kernel(256, 256)), InvalidArgument);
  BOOST_CHECK_THROW(occupancy(h, kernel(256, 32, -1)), InvalidArgument);
  BOOST_CHECK_THROW(occupancy(h, kernel(256, 32, 0, -4)), InvalidArgument);
  KernelResources negativeDynamic = kernel(256, 32);
  negativeDynamic.dynamicSharedBytes = -1;
  BOOST_CHECK_THROW(occupancy(h, negativeDynamic), InvalidArgument);
  // Malformed devices.
  auto bad = h;
  bad.smCount = 0;
  BOOST_CHECK_THROW(occupancy(bad, kernel(256, 32)), InvalidArgument);
  bad = h;
  bad.maxWarpsPerSm = 48;  // 48 x 32 != 2048 threads
  BOOST_CHECK_THROW(validate(bad), InvalidArgument);
  bad = h;
  bad.registerAllocationUnitSize = 0;
  BOOST_CHECK_THROW(validate(bad), InvalidArgument);
  bad = h;
  bad.sharedMemPerBlockMax = 228 * 1024;  // plus the reserve exceeds the SM
  BOOST_CHECK_THROW(validate(bad), InvalidArgument);
  bad = h;
  bad.reservedSharedMemPerBlock = -1;
  BOOST_CHECK_THROW(validate(bad), InvalidArgument);
}

// --- Real Kokkos kernels -------------------------------------------------------------------------

namespace {

template <class Space>
using DeviceView = Kokkos::View<float*, typename Space::memory_space>;

template <class Space>
struct Axpy {
  Kokkos::View<const float*, typename Space::memory_space> x;
  DeviceView<Space> y;
  float a;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const { y(i) += a * x(i); }
};

// Each team stages a tile in level-0 scratch and averages neighbours.
template <class Space>
struct TeamStencil {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  using Scratch =
      Kokkos::View<float*, typename Space::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  Kokkos::View<const float*, typename Space::memory_space> in;
  DeviceView<Space> out;
  int tile;
  KOKKOS_INLINE_FUNCTION void operator()(Member const& m) const {
    Scratch s(m.team_scratch(0), tile);
    const int base = m.league_rank() * tile;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, tile),
                         [&](const int i) { s(i) = in(base + i); });
    m.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, tile), [&](const int i) {
      out(base + i) = 0.5f * (s(i) + s((i + 1) % tile));
    });
  }
};

template <class Space>
struct RangeSum {
  Kokkos::View<const float*, typename Space::memory_space> x;
  KOKKOS_INLINE_FUNCTION void operator()(const int i, double& s) const { s += x(i); }
};

template <class Space>
struct TeamSum {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  Kokkos::View<const float*, typename Space::memory_space> x;
  int tile;
  KOKKOS_INLINE_FUNCTION void operator()(Member const& m, double& s) const {
    const int base = m.league_rank() * tile;
    double t = 0.0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(m, tile), [&](const int j, double& u) { u += x(base + j); }, t);
    Kokkos::single(Kokkos::PerTeam(m), [&]() { s += t; });
  }
};

template <class Space>
Kokkos::TeamPolicy<Space> teamPolicy(int league, int cudaTeamSize) {
  if constexpr (gpu::runsOnCuda<Kokkos::TeamPolicy<Space>>())
    return Kokkos::TeamPolicy<Space>(league, cudaTeamSize);
  else
    return Kokkos::TeamPolicy<Space>(league, Kokkos::AUTO);
}

#if KORTEX_CUDA_KERNEL_RESOURCES
// The model fed with the kernel's real resources gives the occupancy API's count.
void checkAgainstApi(const char* what, std::optional<gpu::CudaKernelInfo> const& info,
                     DeviceLimits const& device) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(info.has_value());
    BOOST_TEST(info->occupancyApiError.empty());
    BOOST_TEST(info->occupancyApiBlocksPerSm >= 1);
    BOOST_TEST(info->resources.registersPerThread > 0);
    BOOST_TEST(info->resources.threadsPerBlock == info->blockDimX * info->blockDimY);
    BOOST_TEST(info->resources.threadsPerBlock <= info->maxThreadsPerBlock);
    const auto r = occupancy(device, info->resources);
    BOOST_TEST(r.blocksPerSm == info->occupancyApiBlocksPerSm);
    std::cout << "tstOccupancy: " << what << ": " << info->resources.registersPerThread
              << " registers, " << info->resources.staticSharedBytes << " B static + "
              << info->resources.dynamicSharedBytes << " B dynamic shared, "
              << info->resources.localBytesPerThread << " B local, block " << info->blockDimX
              << "x" << info->blockDimY << ", closure " << info->closureBytes << " B in "
              << info->launchMechanism << "; model: " << describe(r)
              << "; cudaOccupancyMaxActiveBlocksPerMultiprocessor: "
              << info->occupancyApiBlocksPerSm << std::endl;
  }
}
#endif

}  // namespace

BOOST_AUTO_TEST_CASE(current_device_limits) {
  const auto limits = gpu::currentDeviceLimits();
  BOOST_TEST(limits.has_value() == gpu::cudaKernelResourcesAvailable());
  if (!limits) return;
  BOOST_TEST(!limits->name.empty());
  BOOST_CHECK_NO_THROW(validate(*limits));
  std::cout << "tstOccupancy: device " << limits->name << ", sm_" << limits->computeCapability
            << ", " << limits->smCount << " SMs" << std::endl;
  if (limits->computeCapability == 90) {
    // The sm_90 preset is what the device reports (SM count aside: H100 PCIe has 114).
    const auto p = DeviceLimits::h100Sxm();
    BOOST_TEST(limits->maxThreadsPerSm == p.maxThreadsPerSm);
    BOOST_TEST(limits->maxBlocksPerSm == p.maxBlocksPerSm);
    BOOST_TEST(limits->maxWarpsPerSm == p.maxWarpsPerSm);
    BOOST_TEST(limits->registersPerSm == p.registersPerSm);
    BOOST_TEST(limits->registersPerBlockMax == p.registersPerBlockMax);
    BOOST_TEST(limits->sharedMemPerSm == p.sharedMemPerSm);
    BOOST_TEST(limits->sharedMemPerBlockDefault == p.sharedMemPerBlockDefault);
    BOOST_TEST(limits->sharedMemPerBlockMax == p.sharedMemPerBlockMax);
    BOOST_TEST(limits->reservedSharedMemPerBlock == p.reservedSharedMemPerBlock);
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(kokkos_kernels_match_occupancy_api, Space, test::ExecutionSpaces) {
  constexpr int tile = 512;
  constexpr int league = 64;
  constexpr int n = tile * league;
  DeviceView<Space> x("kortex::test::occupancy::x", n);
  DeviceView<Space> y("kortex::test::occupancy::y", n);
  Kokkos::deep_copy(x, 1.0f);
  Kokkos::deep_copy(y, 2.0f);

  using TeamPolicy = Kokkos::TeamPolicy<Space>;
  using Scratch = typename TeamStencil<Space>::Scratch;
  const Axpy<Space> axpy{x, y, 3.0f};
  const TeamStencil<Space> stencil{x, y, tile};
  const RangeSum<Space> rangeSum{x};
  const TeamSum<Space> teamSum{x, tile};
  const Kokkos::RangePolicy<Space> range(0, n);
  TeamPolicy team = teamPolicy<Space>(league, 128);
  team.set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(tile)));
  const TeamPolicy teamNoScratch = teamPolicy<Space>(league, 128);

  // The kernels are real: run them.
  Kokkos::parallel_for("kortex::test::occupancy::axpy", range, axpy);  // y = 2 + 3 = 5
  Kokkos::parallel_for("kortex::test::occupancy::stencil", team, stencil);  // y = 1
  double sumRange = 0.0, sumTeam = 0.0;
  Kokkos::parallel_reduce("kortex::test::occupancy::rangeSum", range, rangeSum, sumRange);
  Kokkos::parallel_reduce("kortex::test::occupancy::teamSum", teamNoScratch, teamSum, sumTeam);
  Kokkos::fence();
  auto yHost = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  BOOST_TEST(yHost(0) == 1.0f);
  BOOST_TEST(yHost(n - 1) == 1.0f);
  BOOST_TEST(sumRange == static_cast<double>(n));
  BOOST_TEST(sumTeam == static_cast<double>(n));

  const auto forRange = gpu::cudaParallelForInfo(range, axpy);
  const auto forTeam = gpu::cudaParallelForInfo(team, stencil);
  const auto reduceRange = gpu::cudaParallelReduceInfo(range, rangeSum, sumRange);
  const auto reduceTeam = gpu::cudaParallelReduceInfo(teamNoScratch, teamSum, sumTeam);
  if constexpr (!gpu::runsOnCuda<Kokkos::RangePolicy<Space>>()) {
    // Host spaces launch no CUDA kernel.
    BOOST_TEST(!forRange.has_value());
    BOOST_TEST(!forTeam.has_value());
    BOOST_TEST(!reduceRange.has_value());
    BOOST_TEST(!reduceTeam.has_value());
  } else {
#if KORTEX_CUDA_KERNEL_RESOURCES
    const auto device = gpu::currentDeviceLimits();
    BOOST_TEST_REQUIRE(device.has_value());
    checkAgainstApi("RangePolicy parallel_for", forRange, *device);
    checkAgainstApi("TeamPolicy parallel_for with scratch", forTeam, *device);
    checkAgainstApi("RangePolicy parallel_reduce", reduceRange, *device);
    checkAgainstApi("TeamPolicy parallel_reduce", reduceTeam, *device);

    // What the team kernel gets at launch: 128 threads, Kokkos' 8 * (128 + 2) B of team
    // bookkeeping plus the scratch the policy asked for.
    BOOST_TEST(forTeam->resources.threadsPerBlock == 128);
    BOOST_TEST(forTeam->resources.dynamicSharedBytes ==
               static_cast<std::int64_t>(8 * (128 + 2) + Scratch::shmem_size(tile)));
    BOOST_TEST(forRange->resources.dynamicSharedBytes == 0);
    BOOST_TEST(forRange->resources.threadsPerBlock % 32 == 0);
    // A double sum over a range: (block + 2) doubles of reduction buffer.
    BOOST_TEST(reduceRange->resources.dynamicSharedBytes ==
               static_cast<std::int64_t>(8 * (reduceRange->resources.threadsPerBlock + 2)));
    // Small closures travel as kernel arguments.
    BOOST_TEST(forRange->launchMechanism == "local memory");

    // Shared-memory bound: a 32 KB tile per team of 128 (as far as Kokkos allows level 0).
    const int bigTile = static_cast<int>(std::min<std::size_t>(
        32 * 1024, TeamPolicy::scratch_size_max(0) - 1024) / sizeof(float));
    TeamPolicy bigTeam = teamPolicy<Space>(n / bigTile, 128);
    bigTeam.set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(bigTile)));
    const TeamStencil<Space> bigStencil{x, y, bigTile};
    const auto forBig = gpu::cudaParallelForInfo(bigTeam, bigStencil);
    checkAgainstApi("TeamPolicy parallel_for, 32 KB scratch", forBig, *device);
    BOOST_TEST(occupancy(*device, forBig->resources).limiter == OccupancyLimit::SharedMemory);

    // Overriding the dynamic shared memory: the range kernel with 40 KB per block.
    const auto forRange40k = gpu::cudaParallelForInfo(range, axpy, std::int64_t{40 * 1024});
    checkAgainstApi("RangePolicy parallel_for, 40 KB dynamic", forRange40k, *device);
    BOOST_TEST(forRange40k->resources.dynamicSharedBytes == 40 * 1024);

    // Launch bounds select another kernel (__launch_bounds__(128, 8)).
    using Bounded = Kokkos::TeamPolicy<Space, Kokkos::LaunchBounds<128, 8>>;
    Bounded bounded(league, 128);
    bounded.set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(tile)));
    checkAgainstApi("TeamPolicy<LaunchBounds<128, 8>> parallel_for",
                    gpu::cudaParallelForInfo(bounded, TeamStencil<Space>{x, y, tile}), *device);
#endif
  }
}
