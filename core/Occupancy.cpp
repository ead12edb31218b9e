#include "core/Occupancy.hpp"

#include <algorithm>
#include <climits>
#include <utility>
#include <cstdio>

#include "core/Errors.hpp"

namespace kortex {

namespace {

std::int64_t roundUp(std::int64_t x, std::int64_t unit) { return (x + unit - 1) / unit * unit; }
std::int64_t divUp(std::int64_t x, std::int64_t y) { return (x + y - 1) / y; }

void requirePositive(std::int64_t v, const char* what, DeviceLimits const& d) {
  if (v <= 0)
    throw InvalidArgument("device limits of '" + d.name + "': " + what + " must be positive (got " +
                          std::to_string(v) + ")");
}

}  // namespace

DeviceLimits DeviceLimits::geforceGtx480() {
  DeviceLimits d;
  d.name = "NVIDIA GeForce GTX 480";
  d.computeCapability = 20;
  d.smCount = 15;
  d.warpSize = 32;
  d.maxThreadsPerBlock = 1024;
  d.maxThreadsPerSm = 1536;
  d.maxBlocksPerSm = 8;
  d.maxWarpsPerSm = 48;
  d.registersPerSm = 32768;
  d.registersPerBlockMax = 32768;
  d.registerAllocationUnitSize = 64;
  d.registerAllocationGranularity = RegisterGranularity::Warp;
  d.warpAllocationGranularity = 2;
  d.maxRegistersPerThread = 63;
  d.sharedMemPerSm = 48 * 1024;  // 48 KB shared / 16 KB L1 (the other split gives 16 KB)
  d.sharedMemPerBlockDefault = 48 * 1024;
  d.sharedMemPerBlockMax = 48 * 1024;
  d.sharedMemAllocationUnit = 128;
  d.reservedSharedMemPerBlock = 0;
  return d;
}

namespace {
DeviceLimits hopperSm90(std::string name) {
  DeviceLimits d;
  d.name = std::move(name);
  d.computeCapability = 90;
  d.smCount = 132;
  d.warpSize = 32;
  d.maxThreadsPerBlock = 1024;
  d.maxThreadsPerSm = 2048;
  d.maxBlocksPerSm = 32;
  d.maxWarpsPerSm = 64;
  d.registersPerSm = 64 * 1024;
  d.registersPerBlockMax = 64 * 1024;
  d.registerAllocationUnitSize = 256;
  d.registerAllocationGranularity = RegisterGranularity::Warp;
  d.warpAllocationGranularity = 4;  // registers are split over 4 SM sub-partitions
  d.maxRegistersPerThread = 255;
  d.sharedMemPerSm = 228 * 1024;
  d.sharedMemPerBlockDefault = 48 * 1024;
  d.sharedMemPerBlockMax = 227 * 1024;
  d.sharedMemAllocationUnit = 128;
  d.reservedSharedMemPerBlock = 1024;
  return d;
}
}  // namespace

// cudaDeviceProp::name of the SXM parts.
DeviceLimits DeviceLimits::h100Sxm() { return hopperSm90("NVIDIA H100 80GB HBM3"); }
DeviceLimits DeviceLimits::h200() { return hopperSm90("NVIDIA H200"); }

const char* toString(OccupancyLimit l) {
  switch (l) {
    case OccupancyLimit::None: return "none";
    case OccupancyLimit::Warps: return "warps";
    case OccupancyLimit::Registers: return "registers";
    case OccupancyLimit::SharedMemory: return "shared memory";
    case OccupancyLimit::BlocksPerSm: return "blocks per SM";
  }
  return "?";
}

void validate(DeviceLimits const& d) {
  requirePositive(d.computeCapability, "computeCapability", d);
  requirePositive(d.smCount, "smCount", d);
  requirePositive(d.warpSize, "warpSize", d);
  requirePositive(d.maxThreadsPerBlock, "maxThreadsPerBlock", d);
  requirePositive(d.maxThreadsPerSm, "maxThreadsPerSm", d);
  requirePositive(d.maxBlocksPerSm, "maxBlocksPerSm", d);
  requirePositive(d.maxWarpsPerSm, "maxWarpsPerSm", d);
  requirePositive(d.registersPerSm, "registersPerSm", d);
  requirePositive(d.registersPerBlockMax, "registersPerBlockMax", d);
  requirePositive(d.registerAllocationUnitSize, "registerAllocationUnitSize", d);
  requirePositive(d.warpAllocationGranularity, "warpAllocationGranularity", d);
  requirePositive(d.maxRegistersPerThread, "maxRegistersPerThread", d);
  requirePositive(d.sharedMemPerSm, "sharedMemPerSm", d);
  requirePositive(d.sharedMemPerBlockDefault, "sharedMemPerBlockDefault", d);
  requirePositive(d.sharedMemPerBlockMax, "sharedMemPerBlockMax", d);
  requirePositive(d.sharedMemAllocationUnit, "sharedMemAllocationUnit", d);
  if (d.reservedSharedMemPerBlock < 0)
    throw InvalidArgument("device limits of '" + d.name +
                          "': reservedSharedMemPerBlock must not be negative");
  if (static_cast<std::int64_t>(d.maxWarpsPerSm) * d.warpSize != d.maxThreadsPerSm)
    throw InvalidArgument("device limits of '" + d.name + "': maxWarpsPerSm (" +
                          std::to_string(d.maxWarpsPerSm) + ") times warpSize (" +
                          std::to_string(d.warpSize) + ") differs from maxThreadsPerSm (" +
                          std::to_string(d.maxThreadsPerSm) + ")");
  if (d.maxThreadsPerBlock > d.maxThreadsPerSm || d.registersPerBlockMax > d.registersPerSm ||
      d.sharedMemPerBlockDefault > d.sharedMemPerBlockMax ||
      d.sharedMemPerBlockMax + d.reservedSharedMemPerBlock > d.sharedMemPerSm)
    throw InvalidArgument("device limits of '" + d.name +
                          "': a per-block limit exceeds the corresponding per-SM limit");
}

OccupancyReport occupancy(DeviceLimits const& d, KernelResources const& k) {
  validate(d);
  if (k.threadsPerBlock < 1 || k.threadsPerBlock > d.maxThreadsPerBlock)
    throw InvalidArgument("occupancy: threadsPerBlock must be in [1, " +
                          std::to_string(d.maxThreadsPerBlock) + "] on " + d.name + " (got " +
                          std::to_string(k.threadsPerBlock) + ")");
  if (k.registersPerThread < 0 || k.registersPerThread > d.maxRegistersPerThread)
    throw InvalidArgument("occupancy: registersPerThread must be in [0, " +
                          std::to_string(d.maxRegistersPerThread) + "] on " + d.name + " (got " +
                          std::to_string(k.registersPerThread) + ")");
  if (k.staticSharedBytes < 0 || k.dynamicSharedBytes < 0 || k.localBytesPerThread < 0)
    throw InvalidArgument("occupancy: shared and local memory sizes must not be negative");

  OccupancyReport r;
  const int noLimit = INT_MAX;

  // (1) Warps per block.
  r.warpsPerBlock = static_cast<int>(divUp(k.threadsPerBlock, d.warpSize));

  // (4) Blocks limited by the SM's warp slots.
  const int byWarps = d.maxWarpsPerSm / r.warpsPerBlock;

  // (2), (3) Registers allocated per warp and per block; (5) blocks limited by the register file.
  int byRegisters = noLimit;
  const std::int64_t warpsForRegisters = roundUp(r.warpsPerBlock, d.warpAllocationGranularity);
  if (d.registerAllocationGranularity == RegisterGranularity::Warp) {
    const std::int64_t perWarp =
        roundUp(static_cast<std::int64_t>(k.registersPerThread) * d.warpSize,
                d.registerAllocationUnitSize);
    r.registersPerWarp = static_cast<int>(perWarp);
    r.registersPerBlock = static_cast<int>(perWarp * r.warpsPerBlock);
    if (perWarp * warpsForRegisters > d.registersPerBlockMax) {
      byRegisters = 0;
      r.reason = std::to_string(perWarp * warpsForRegisters) + " registers per block (" +
                 std::to_string(k.registersPerThread) + " per thread) exceed the limit of " +
                 std::to_string(d.registersPerBlockMax);
    } else if (perWarp > 0) {
      // Warps that fit the register file, counted in groups of the warp allocation granularity
      // (registers are split over the SM's sub-partitions).
      const std::int64_t g = d.warpAllocationGranularity;
      const std::int64_t warpsByRegisters = g * (d.registersPerSm / (perWarp * g));
      byRegisters = static_cast<int>(warpsByRegisters / r.warpsPerBlock);
    }
  } else {
    const std::int64_t perBlock = roundUp(warpsForRegisters * k.registersPerThread * d.warpSize,
                                          d.registerAllocationUnitSize);
    r.registersPerWarp = 0;
    r.registersPerBlock = static_cast<int>(perBlock);
    if (perBlock > d.registersPerBlockMax) {
      byRegisters = 0;
      r.reason = std::to_string(perBlock) + " registers per block (" +
                 std::to_string(k.registersPerThread) + " per thread) exceed the limit of " +
                 std::to_string(d.registersPerBlockMax);
    } else if (perBlock > 0) {
      byRegisters = static_cast<int>(d.registersPerSm / perBlock);
    }
  }

  // (6) Shared memory allocated per block (with the driver's reserve) and the blocks it allows.
  int bySharedMemory = noLimit;
  const std::int64_t requested = k.staticSharedBytes + k.dynamicSharedBytes;
  const std::int64_t perBlockLimit =
      k.sharedMemOptIn ? d.sharedMemPerBlockMax : d.sharedMemPerBlockDefault;
  r.sharedBytesPerBlock =
      roundUp(requested + d.reservedSharedMemPerBlock, d.sharedMemAllocationUnit);
  if (r.sharedBytesPerBlock > perBlockLimit + d.reservedSharedMemPerBlock) {
    bySharedMemory = 0;
    if (r.reason.empty())
      r.reason = std::to_string(requested) + " B of shared memory per block exceed the " +
                 std::to_string(perBlockLimit) + " B limit" +
                 (k.sharedMemOptIn ? std::string() : std::string(" without opt-in"));
  } else if (r.sharedBytesPerBlock > 0) {
    bySharedMemory = static_cast<int>(d.sharedMemPerSm / r.sharedBytesPerBlock);
  }

  // (7) The minimum, and which limits reach it. A limit that does not apply (no registers, no
  // shared memory) is reported as maxBlocksPerSm and never binds.
  r.blocksPerSm = std::min({byWarps, byRegisters, bySharedMemory, d.maxBlocksPerSm});
  r.blocksLimitedByWarps = byWarps;
  r.blocksLimitedByRegisters = byRegisters == noLimit ? d.maxBlocksPerSm : byRegisters;
  r.blocksLimitedBySharedMemory = bySharedMemory == noLimit ? d.maxBlocksPerSm : bySharedMemory;
  r.blocksLimitedByBlocksPerSm = d.maxBlocksPerSm;
  const struct {
    OccupancyLimit limit;
    int blocks;
  } limits[] = {{OccupancyLimit::Warps, byWarps},
                {OccupancyLimit::Registers, byRegisters},
                {OccupancyLimit::SharedMemory, bySharedMemory},
                {OccupancyLimit::BlocksPerSm, d.maxBlocksPerSm}};
  for (auto const& l : limits) {
    if (l.blocks != r.blocksPerSm) continue;
    r.bindingMask |= static_cast<unsigned>(l.limit);
    if (r.limiter == OccupancyLimit::None) r.limiter = l.limit;
  }
  r.activeWarpsPerSm = r.blocksPerSm * r.warpsPerBlock;
  r.activeThreadsPerSm = r.blocksPerSm * k.threadsPerBlock;
  r.occupancy = static_cast<double>(r.activeWarpsPerSm) / d.maxWarpsPerSm;
  return r;
}

std::string describe(OccupancyReport const& r) {
  if (r.blocksPerSm == 0) return "0 blocks/SM (cannot launch: " + r.reason + ")";
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * r.occupancy);
  std::string s = std::to_string(r.blocksPerSm) + " blocks/SM (" +
                  std::to_string(r.activeThreadsPerSm) + " threads, " +
                  std::to_string(r.activeWarpsPerSm) + " warps, " + pct + "), limited by ";
  bool first = true;
  for (auto l : {OccupancyLimit::Warps, OccupancyLimit::Registers, OccupancyLimit::SharedMemory,
                 OccupancyLimit::BlocksPerSm}) {
    if (!r.binds(l)) continue;
    if (!first) s += ", ";
    s += toString(l);
    first = false;
  }
  return s;
}

}  // namespace kortex
