#include "gpu/Resources.hpp"

namespace kortex::gpu {

#if KORTEX_CUDA_KERNEL_RESOURCES

// What cudaDeviceProp does not say comes from NVIDIA's occupancy calculator (cuda_occupancy.h of
// CUDA 13.0: cudaOccRegAllocationGranularity, cudaOccSubPartitionsPerMultiprocessor,
// cudaOccSMemAllocationGranularity) and, for sm_2x, the CUDA Occupancy Calculator spreadsheet.
DeviceLimits deviceLimitsFromProperties(cudaDeviceProp const& prop) {
  DeviceLimits d;
  d.name = prop.name;
  d.computeCapability = 10 * prop.major + prop.minor;
  d.smCount = prop.multiProcessorCount;
  d.warpSize = prop.warpSize;
  d.maxThreadsPerBlock = prop.maxThreadsPerBlock;
  d.maxThreadsPerSm = prop.maxThreadsPerMultiProcessor;
  d.maxBlocksPerSm = prop.maxBlocksPerMultiProcessor;
  d.maxWarpsPerSm = prop.maxThreadsPerMultiProcessor / prop.warpSize;
  d.registersPerSm = prop.regsPerMultiprocessor;
  d.registersPerBlockMax = prop.regsPerBlock;
  d.registerAllocationGranularity = RegisterGranularity::Warp;
  d.registerAllocationUnitSize = prop.major == 2 ? 64 : 256;
  // Warps take registers in groups of the SM's sub-partitions (2 on sm_20 and GP100, 4 elsewhere).
  d.warpAllocationGranularity = (prop.major == 2 || (prop.major == 6 && prop.minor == 0)) ? 2 : 4;
  d.maxRegistersPerThread = (prop.major == 2 || (prop.major == 3 && prop.minor == 0)) ? 63 : 255;
  d.sharedMemPerSm = static_cast<std::int64_t>(prop.sharedMemPerMultiprocessor);
  d.sharedMemPerBlockDefault = static_cast<std::int64_t>(prop.sharedMemPerBlock);
  d.sharedMemPerBlockMax = prop.sharedMemPerBlockOptin > 0
                               ? static_cast<std::int64_t>(prop.sharedMemPerBlockOptin)
                               : d.sharedMemPerBlockDefault;
  d.sharedMemAllocationUnit = (prop.major >= 3 && prop.major <= 7) ? 256 : 128;
  d.reservedSharedMemPerBlock = static_cast<std::int64_t>(prop.reservedSharedMemPerBlock);
  return d;
}

std::optional<DeviceLimits> currentDeviceLimits() {
  if (Kokkos::is_initialized())
    return deviceLimitsFromProperties(Kokkos::Cuda().cuda_device_prop());
  int device = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return deviceLimitsFromProperties(prop);
}

#else

std::optional<DeviceLimits> currentDeviceLimits() { return std::nullopt; }

#endif

}  // namespace kortex::gpu
