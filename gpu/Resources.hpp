// Real resources of the CUDA kernels Kokkos launches, for the occupancy model of
// core/Occupancy.hpp: registers, static shared memory, local memory (spills, stack) and block
// size of the very kernel a parallel_for / parallel_reduce runs, the dynamic shared memory Kokkos
// passes at launch, the device's limits, and the CUDA occupancy API's answer for the same
// function, to check the model against.
//
// How (Kokkos 4.x internals, checked against 4.6.99): parallel_for(policy, functor) builds a
// closure of type DriverType = Kokkos::Impl::ParallelFor<Functor, Policy> (parallel_reduce:
// Kokkos::Impl::ParallelReduce<CombinedFunctorReducer<Functor, Analysis::Reducer>, Policy>,
// with the reducer type Kokkos::Impl::ParallelReduceAdaptor derives from the result argument)
// and launches it through Kokkos::Impl::CudaParallelLaunch<DriverType, Policy::launch_bounds>,
// whose launch mechanism (DeduceCudaLaunchMechanism: closure as a kernel argument below 512 B,
// else copied to constant memory, else to global memory) picks one __global__ function template:
// cuda_parallel_launch_{local,constant,global}_memory<DriverType[, maxT, minB]>.
// CudaParallelLaunch<DriverType, LaunchBounds>::get_cuda_func_attributes(instance) returns that
// function's cudaFuncAttributes (Kokkos caches them per device), and ::get_kernel_func() its
// address, which we give to cudaOccupancyMaxActiveBlocksPerMultiprocessor. The block shape and
// the dynamic shared memory are recomputed the way the Kokkos 4.6 CUDA back end does at launch:
//  * RangePolicy parallel_for: block (1, cuda_get_opt_block_size(...)), no dynamic shared memory;
//  * RangePolicy parallel_reduce: block (1, n), n the largest power of two <= 256 whose reduction
//    buffer (n + 2) * value size fits (ParallelReduce::local_block_size), dynamic = that buffer;
//  * TeamPolicy: block (vector length, team size; AUTO -> team_size_recommended), dynamic =
//    8 * (team size + 2) + scratch_size(0) + the functor's team_shmem_size, plus the reduction
//    buffer (team size + 2) * value size for reductions of run-time-sized values.
// Other policies (MDRangePolicy, ...) are not supported (compile-time error).
//
// Limits: the __global__ launch templates are `static`, so each translation unit has its own
// copy: query from the TU that launches the kernel (same flags give the same code, but a
// different TU is a different compilation). A policy with Kokkos::Experimental::DesiredOccupancy
// makes Kokkos set a shared-memory carveout at launch, which the occupancy API then sees and the
// model (largest carveout) does not.
//
// Host builds (Kokkos 3.4 Serial, or any build without CUDA) and Kokkos < 4.6: everything
// returns std::nullopt.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "core/Backend.hpp"
#include "core/Compat.hpp"
#include "core/Occupancy.hpp"


namespace kortex::gpu {

// One Kokkos CUDA kernel as the CUDA runtime sees it.
struct CudaKernelInfo {
  // The model's input: numRegs, sharedSizeBytes (static), the dynamic shared memory Kokkos passes
  // at launch, localSizeBytes, and the block size (sharedMemOptIn is false: Kokkos never opts in).
  KernelResources resources;
  int blockDimX = 0;           // Kokkos' block shape: x = vector length (1 for RangePolicy)
  int blockDimY = 0;           //                      y = team size / range block size
  int maxThreadsPerBlock = 0;  // cudaFuncAttributes::maxThreadsPerBlock
  std::int64_t maxDynamicSharedBytes = 0;  // cudaFuncAttributes::maxDynamicSharedSizeBytes
  int ptxVersion = 0;          // cudaFuncAttributes, 10 * major + minor
  int binaryVersion = 0;
  std::size_t closureBytes = 0;  // sizeof(DriverType): the functor plus Kokkos' bookkeeping
  // How the closure reaches the kernel: "local memory" (as the kernel argument), "constant
  // memory" or "global memory".
  std::string launchMechanism;
  // cudaOccupancyMaxActiveBlocksPerMultiprocessor(kernel, threads, dynamic shared memory):
  // -1 with occupancyApiError set if the call failed.
  int occupancyApiBlocksPerSm = -1;
  std::string occupancyApiError;
};

// True in builds where the functions below can answer (CUDA enabled, Kokkos >= 4.6: the
// internals used here were read in 4.6.99; older 4.x builds get std::nullopt).
constexpr bool cudaKernelResourcesAvailable() { return KORTEX_CUDA_KERNEL_RESOURCES != 0; }

// Limits of the CUDA device Kokkos runs on (after Kokkos::initialize; before it, the current CUDA
// device), from cudaGetDeviceProperties plus the per-architecture allocation units and
// granularities of NVIDIA's occupancy calculator (cuda_occupancy.h). std::nullopt in host builds
// or when no CUDA device can be queried.
std::optional<DeviceLimits> currentDeviceLimits();

#if KORTEX_CUDA_KERNEL_RESOURCES
// The same, from given properties (what currentDeviceLimits() uses).
DeviceLimits deviceLimitsFromProperties(cudaDeviceProp const& prop);
#endif

// True when Policy's kernels are CUDA kernels these functions can describe.
template <class Policy>
constexpr bool runsOnCuda() {
#if KORTEX_CUDA_KERNEL_RESOURCES
  return std::is_same_v<typename Policy::execution_space, Kokkos::Cuda>;
#else
  return false;
#endif
}

namespace detail {

template <class Policy>
struct IsTeamPolicy : std::false_type {};
template <class... P>
struct IsTeamPolicy<Kokkos::TeamPolicy<P...>> : std::true_type {};
template <class Policy>
struct IsRangePolicy : std::false_type {};
template <class... P>
struct IsRangePolicy<Kokkos::RangePolicy<P...>> : std::true_type {};

#if KORTEX_CUDA_KERNEL_RESOURCES

inline const char* launchMechanismName(Kokkos::Impl::Experimental::CudaLaunchMechanism m) {
  using M = Kokkos::Impl::Experimental::CudaLaunchMechanism;
  if (m == M::LocalMemory) return "local memory";
  if (m == M::ConstantMemory) return "constant memory";
  if (m == M::GlobalMemory) return "global memory";
  return "unknown";
}

template <class F>
const void* functionAddress(F f) {
  if constexpr (std::is_same_v<std::remove_cv_t<F>, void*>)
    return f;
  else
    return reinterpret_cast<const void*>(f);
}

// Attributes and occupancy of the kernel Kokkos launches for DriverType.
template <class DriverType, class LaunchBounds>
CudaKernelInfo queryKernel(Kokkos::Impl::CudaInternal const* instance,
                           cudaFuncAttributes const& attr, int blockDimX, int blockDimY,
                           std::int64_t dynamicShared) {
  using Launch = Kokkos::Impl::CudaParallelLaunch<DriverType, LaunchBounds>;
  CudaKernelInfo info;
  info.blockDimX = blockDimX;
  info.blockDimY = blockDimY;
  info.resources.registersPerThread = attr.numRegs;
  info.resources.staticSharedBytes = static_cast<std::int64_t>(attr.sharedSizeBytes);
  info.resources.dynamicSharedBytes = dynamicShared;
  info.resources.localBytesPerThread = static_cast<std::int64_t>(attr.localSizeBytes);
  info.resources.threadsPerBlock = blockDimX * blockDimY;
  info.resources.sharedMemOptIn = false;
  info.maxThreadsPerBlock = attr.maxThreadsPerBlock;
  info.maxDynamicSharedBytes = attr.maxDynamicSharedSizeBytes;
  info.ptxVersion = attr.ptxVersion;
  info.binaryVersion = attr.binaryVersion;
  info.closureBytes = sizeof(DriverType);
  info.launchMechanism =
      launchMechanismName(Kokkos::Impl::DeduceCudaLaunchMechanism<DriverType>::launch_mechanism);

  instance->set_cuda_device();
  int blocks = 0;
  const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, functionAddress(Launch::get_kernel_func()), info.resources.threadsPerBlock,
      static_cast<std::size_t>(dynamicShared));
  if (err == cudaSuccess) {
    info.occupancyApiBlocksPerSm = blocks;
  } else {
    info.occupancyApiError = cudaGetErrorString(err);
    (void)cudaGetLastError();  // do not leave the error for Kokkos' next check
  }
  return info;
}

template <class DriverType, class LaunchBounds>
cudaFuncAttributes attributesOf(Kokkos::Impl::CudaInternal const* instance) {
  return Kokkos::Impl::CudaParallelLaunch<DriverType, LaunchBounds>::get_cuda_func_attributes(
      instance);
}

// The closure type parallel_reduce(policy, functor, result) builds (ParallelReduceAdaptor).
template <class Policy, class Functor, class ReturnType>
struct ReduceClosure {
  using ReturnValue = Kokkos::Impl::ParallelReduceReturnValue<void, ReturnType, Functor>;
  using PassedReducer = typename ReturnValue::reducer_type;
  static constexpr bool passedReducerIsInvalid = std::is_same_v<Kokkos::InvalidType, PassedReducer>;
  using TheReducer = std::conditional_t<passedReducerIsInvalid, Functor, PassedReducer>;
  using Analysis = Kokkos::Impl::FunctorAnalysis<Kokkos::Impl::FunctorPatternInterface::REDUCE,
                                                 Policy, TheReducer,
                                                 typename ReturnValue::value_type>;
  using Reducer = typename Analysis::Reducer;
  using Combined = Kokkos::Impl::CombinedFunctorReducer<Functor, Reducer>;
  using type = Kokkos::Impl::ParallelReduce<
      Combined, Policy,
      typename Kokkos::Impl::FunctorPolicyExecutionSpace<Functor, Policy>::execution_space>;

  static Reducer makeReducer(Functor const& functor, ReturnType const& result) {
    if constexpr (passedReducerIsInvalid) {
      (void)result;
      return Reducer(functor);
    } else {
      (void)functor;
      return Reducer(result);
    }
  }
};

#endif  // KORTEX_CUDA_KERNEL_RESOURCES

}  // namespace detail

// The kernel Kokkos launches for parallel_for(policy, functor): std::nullopt unless this is a
// CUDA build and Policy runs on Kokkos::Cuda. `dynamicSharedBytes` overrides the dynamic shared
// memory Kokkos would pass (e.g. to ask "what if the team scratch were larger").
// Needs Kokkos initialised. Policy: Kokkos::RangePolicy or Kokkos::TeamPolicy.
template <class Policy, class Functor>
std::optional<CudaKernelInfo> cudaParallelForInfo(
    Policy const& policy, Functor const& functor,
    std::optional<std::int64_t> dynamicSharedBytes = std::nullopt) {
  static_assert(detail::IsRangePolicy<Policy>::value || detail::IsTeamPolicy<Policy>::value,
                "cudaParallelForInfo supports Kokkos::RangePolicy and Kokkos::TeamPolicy");
  if constexpr (!runsOnCuda<Policy>()) {
    (void)policy, (void)functor, (void)dynamicSharedBytes;
    return std::nullopt;
  } else {
#if KORTEX_CUDA_KERNEL_RESOURCES
    using LaunchBounds = typename Policy::launch_bounds;
    using Driver = Kokkos::Impl::ParallelFor<Functor, Policy>;
    auto const* instance = policy.space().impl_internal_space_instance();
    const cudaFuncAttributes attr = detail::attributesOf<Driver, LaunchBounds>(instance);
    int blockX = 1, blockY = 0;
    std::int64_t dynamic = 0;
    if constexpr (detail::IsTeamPolicy<Policy>::value) {
      const int teamSize = policy.team_size() > 0
                               ? policy.team_size()
                               : policy.team_size_recommended(functor, Kokkos::ParallelForTag());
      blockX = policy.impl_vector_length();
      blockY = teamSize;
      // ParallelFor<Functor, TeamPolicy, Cuda>: m_shmem_begin + m_shmem_size.
      dynamic = static_cast<std::int64_t>(sizeof(double)) * (teamSize + 2) +
                static_cast<std::int64_t>(policy.scratch_size(0, teamSize)) +
                static_cast<std::int64_t>(
                    Kokkos::Impl::FunctorTeamShmemSize<Functor>::value(functor, teamSize));
    } else {
      // ParallelFor<Functor, RangePolicy, Cuda>::execute.
      blockY = Kokkos::Impl::cuda_get_opt_block_size<Functor, LaunchBounds>(instance, attr, functor,
                                                                            1, 0, 0);
      dynamic = 0;
    }
    if (dynamicSharedBytes) dynamic = *dynamicSharedBytes;
    return detail::queryKernel<Driver, LaunchBounds>(instance, attr, blockX, blockY, dynamic);
#else
    return std::nullopt;
#endif
  }
}

// The kernel Kokkos launches for parallel_reduce(policy, functor, result); `result` is what
// would be passed to parallel_reduce (a scalar, a View or a reducer such as Kokkos::Sum): only
// its type matters, and the reducer's. Otherwise as cudaParallelForInfo.
template <class Policy, class Functor, class ReturnType>
std::optional<CudaKernelInfo> cudaParallelReduceInfo(
    Policy const& policy, Functor const& functor, ReturnType const& result,
    std::optional<std::int64_t> dynamicSharedBytes = std::nullopt) {
  static_assert(detail::IsRangePolicy<Policy>::value || detail::IsTeamPolicy<Policy>::value,
                "cudaParallelReduceInfo supports Kokkos::RangePolicy and Kokkos::TeamPolicy");
  if constexpr (!runsOnCuda<Policy>()) {
    (void)policy, (void)functor, (void)result, (void)dynamicSharedBytes;
    return std::nullopt;
  } else {
#if KORTEX_CUDA_KERNEL_RESOURCES
    using Closure = detail::ReduceClosure<Policy, Functor, std::remove_cv_t<ReturnType>>;
    using Driver = typename Closure::type;
    using LaunchBounds = typename Policy::launch_bounds;
    using WorkTag = typename Policy::work_tag;
    using ValueType = typename Closure::Reducer::value_type;  // Driver::value_type (private in
                                                              // the team specialisation)
    auto const* instance = policy.space().impl_internal_space_instance();
    const cudaFuncAttributes attr = detail::attributesOf<Driver, LaunchBounds>(instance);
    // Shared buffer of the inter-thread reduction for a block of n: (n + 2) values.
    auto reduceScanShmem = [&](unsigned n) {
      return static_cast<std::int64_t>(
          Kokkos::Impl::cuda_single_inter_block_reduce_scan_shmem<false, WorkTag, ValueType>(
              functor, n));
    };
    // None where Kokkos reduces through warp shuffles (team reductions of static-size values).
    auto reduceBuffer = [&](int n) -> std::int64_t {
      return Driver::UseShflReduction ? 0 : reduceScanShmem(static_cast<unsigned>(n));
    };
    int blockX = 1, blockY = 0;
    std::int64_t dynamic = 0;
    if constexpr (detail::IsTeamPolicy<Policy>::value) {
      const int teamSize =
          policy.team_size() > 0
              ? policy.team_size()
              : policy.team_size_recommended(functor, Closure::makeReducer(functor, result),
                                             Kokkos::ParallelReduceTag());
      blockX = policy.impl_vector_length();
      blockY = teamSize;
      // ParallelReduce<..., TeamPolicy, Cuda>: m_team_begin + m_shmem_begin + m_shmem_size.
      dynamic = reduceBuffer(teamSize) +
                static_cast<std::int64_t>(sizeof(double)) * (teamSize + 2) +
                static_cast<std::int64_t>(policy.scratch_size(0, teamSize)) +
                static_cast<std::int64_t>(
                    Kokkos::Impl::FunctorTeamShmemSize<Functor>::value(functor, teamSize));
    } else {
      // ParallelReduce<..., RangePolicy, Cuda>::local_block_size: halve 256 until the
      // reduction buffer fits and the block size is launchable.
      const auto maxShmemPerBlock =
          static_cast<std::int64_t>(policy.space().cuda_device_prop().sharedMemPerBlock);
      unsigned n = Kokkos::Impl::CudaTraits::WarpSize * 8;
      std::int64_t shmem = reduceScanShmem(n);
      while ((n && maxShmemPerBlock < shmem) ||
             n > static_cast<unsigned>(
                     Kokkos::Impl::cuda_get_max_block_size<Functor, LaunchBounds>(
                         instance, attr, functor, 1, static_cast<std::size_t>(shmem), 0))) {
        n >>= 1;
        shmem = reduceScanShmem(n);
      }
      blockY = static_cast<int>(n);
      dynamic = reduceBuffer(static_cast<int>(n));
    }
    if (dynamicSharedBytes) dynamic = *dynamicSharedBytes;
    return detail::queryKernel<Driver, LaunchBounds>(instance, attr, blockX, blockY, dynamic);
#else
    return std::nullopt;
#endif
  }
}

// Free memory of the space `Mem` lives in: the CUDA runtime's answer for device memory, else the
// host's MemAvailable (/proc/meminfo), else 0 (unknown).
template <class Mem>
std::int64_t availableMemoryBytes() {
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible) {
    std::size_t freeB = 0, totalB = 0;
    if (cudaMemGetInfo(&freeB, &totalB) == cudaSuccess) return static_cast<std::int64_t>(freeB);
    return 0;
  }
#endif
  return hostAvailableMemoryBytes();
}

}  // namespace kortex::gpu
