// Resource / occupancy model of a CUDA streaming multiprocessor (SM): how many thread blocks of a
// kernel can be resident on one SM at once, given the kernel's registers per thread, shared
// memory per block and block size. This is Section 2.1 of Lee et al., "CUDA Optimization
// Strategies for Compute- and Memory-Bound Neuroimaging Algorithms" (Eqs. 1-7), i.e. the classic
// NVIDIA occupancy calculator, extended with what changed on the GPUs we run today:
//  * register allocation per warp in units (64 registers on sm_20, 256 on sm_30 and later) and
//    warps counted in groups of the warp allocation granularity (2 on sm_20, 4 SM sub-partitions
//    on sm_90);
//  * shared memory allocated in units (128 B on sm_20 and sm_80+), plus a per-block reserve taken
//    by the CUDA driver (1 KB on sm_80 and later);
//  * a per-block shared memory limit of 48 KB unless the kernel opts in to more
//    (cudaFuncAttributeMaxDynamicSharedMemorySize; Kokkos never does).
// Local memory (spills, stack) lives in device memory: it never limits resident blocks.
//
// Pure host C++ (no Kokkos, no CUDA): presets reproduce the paper's GTX 480 numbers and describe
// the H100/H200 (sm_90) we run on; gpu/Resources.hpp fills both structs from a real device and a
// real Kokkos kernel where CUDA is enabled.
//
// The equations, for a block of T threads using R registers per thread and S bytes of shared
// memory (static + dynamic), on an SM with warp size W (names as in DeviceLimits):
//   (1) warps per block          Wb = ceil(T / W)
//   (2) registers per warp       Rw = roundUp(R * W, registerAllocationUnitSize)
//       (block granularity, sm_1x: registers per block = roundUp(roundUp(Wb, G) * R * W, unit))
//   (3) registers per block      Rb = Rw * Wb
//   (4) blocks by warps          Bw = floor(maxWarpsPerSm / Wb)
//   (5) blocks by registers      Br = floor(G * floor(registersPerSm / (Rw * G)) / Wb),
//       G = warpAllocationGranularity; Br = 0 when Rw * roundUp(Wb, G) > registersPerBlockMax
//   (6) blocks by shared memory  Bs = floor(sharedMemPerSm / Sb),
//       Sb = roundUp(S + reservedSharedMemPerBlock, sharedMemAllocationUnit); Bs = 0 when
//       S exceeds the per-block limit (sharedMemPerBlockDefault, or sharedMemPerBlockMax with
//       KernelResources::sharedMemOptIn)
//   (7) blocks per SM            B = min(Bw, Br, Bs, maxBlocksPerSm);
//       occupancy = B * Wb / maxWarpsPerSm
// R = 0 or Sb = 0 puts no limit on (5) or (6). sharedMemPerSm is the largest carveout, which is
// what the CUDA occupancy API assumes for a kernel without a carveout preference.
// (The numbering follows the order of Section 2.1 as summarised in issue 4: granularity, warps,
// registers per block, the three limits, their minimum.)
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace kortex {

// How registers are allocated: per warp (sm_20 and later) or per block (sm_1x).
enum class RegisterGranularity { Warp, Block };

// Per-SM resource limits of one device. All sizes in bytes, registers in 32-bit registers.
struct DeviceLimits {
  std::string name;
  int computeCapability = 0;       // 10 * major + minor: 20 = sm_20, 90 = sm_90
  int smCount = 0;                 // streaming multiprocessors on the device
  int warpSize = 32;
  int maxThreadsPerBlock = 1024;
  int maxThreadsPerSm = 0;
  int maxBlocksPerSm = 0;          // hard limit on resident blocks
  int maxWarpsPerSm = 0;           // = maxThreadsPerSm / warpSize
  int registersPerSm = 0;          // register file size
  int registersPerBlockMax = 0;    // most registers one block may hold
  int registerAllocationUnitSize = 0;  // registers are allocated per warp in multiples of this
  RegisterGranularity registerAllocationGranularity = RegisterGranularity::Warp;
  int warpAllocationGranularity = 1;   // warps are counted in groups of this for registers
  int maxRegistersPerThread = 0;
  std::int64_t sharedMemPerSm = 0;            // largest shared memory carveout per SM
  std::int64_t sharedMemPerBlockDefault = 0;  // per-block limit without opt-in (48 KB)
  std::int64_t sharedMemPerBlockMax = 0;      // per-block limit with opt-in
  std::int64_t sharedMemAllocationUnit = 0;   // shared memory allocated in multiples of this
  std::int64_t reservedSharedMemPerBlock = 0; // taken by the driver per block (1 KB on sm_80+)

  // NVIDIA GeForce GTX 480 (Fermi GF100, sm_20, 15 SMs), in the 48 KB shared / 16 KB L1
  // configuration the paper uses. Limits of the CUDA Occupancy Calculator (compute 2.0).
  static DeviceLimits geforceGtx480();
  // NVIDIA H100 SXM5 and H200 (Hopper GH100, sm_90, 132 SMs each; they differ only in memory).
  // Limits: CUDA C++ Programming Guide, compute capabilities, Tables 30-32 (cc 9.0); allocation
  // units and granularities: cuda_occupancy.h of CUDA 13.0.
  static DeviceLimits h100Sxm();
  static DeviceLimits h200();
};

// What one kernel launch uses.
struct KernelResources {
  int registersPerThread = 0;          // cudaFuncAttributes::numRegs
  std::int64_t staticSharedBytes = 0;  // cudaFuncAttributes::sharedSizeBytes (__shared__ arrays)
  std::int64_t dynamicSharedBytes = 0; // the launch's dynamic shared memory (Kokkos team scratch)
  std::int64_t localBytesPerThread = 0;  // cudaFuncAttributes::localSizeBytes: spills, stack;
                                         // reported, never a limit
  int threadsPerBlock = 0;
  // The kernel raised cudaFuncAttributeMaxDynamicSharedMemorySize, so that a block may use up to
  // DeviceLimits::sharedMemPerBlockMax instead of sharedMemPerBlockDefault.
  bool sharedMemOptIn = false;
};

// Which of Eqs. (4)-(7) gives the minimum.
enum class OccupancyLimit : unsigned {
  None = 0,
  Warps = 1u << 0,         // (4)
  Registers = 1u << 1,     // (5)
  SharedMemory = 1u << 2,  // (6)
  BlocksPerSm = 1u << 3,   // the hard block limit in (7)
};
const char* toString(OccupancyLimit l);
inline std::ostream& operator<<(std::ostream& os, OccupancyLimit l) { return os << toString(l); }

struct OccupancyReport {
  int warpsPerBlock = 0;                     // (1)
  int registersPerWarp = 0;                  // (2) allocated (0 with block granularity)
  int registersPerBlock = 0;                 // (3) allocated
  std::int64_t sharedBytesPerBlock = 0;      // allocated: rounded, with the driver's reserve
  int blocksLimitedByWarps = 0;              // (4)
  int blocksLimitedByRegisters = 0;          // (5)
  int blocksLimitedBySharedMemory = 0;       // (6)
  int blocksLimitedByBlocksPerSm = 0;        // maxBlocksPerSm
  int blocksPerSm = 0;                       // (7)
  int activeWarpsPerSm = 0;
  int activeThreadsPerSm = 0;
  double occupancy = 0.0;                    // activeWarpsPerSm / maxWarpsPerSm, in [0, 1]
  // The limit that binds: the first of Warps, Registers, SharedMemory, BlocksPerSm whose count
  // equals blocksPerSm; bindingMask has a bit for every one that does (ties are common: 256
  // threads of 32 registers on sm_90 are limited by warps and registers alike).
  OccupancyLimit limiter = OccupancyLimit::None;
  unsigned bindingMask = 0;
  // Why no block fits (blocksPerSm == 0), e.g. "64512 B of shared memory per block exceed the
  // 49152 B limit without opt-in"; empty otherwise.
  std::string reason;

  bool binds(OccupancyLimit l) const { return (bindingMask & static_cast<unsigned>(l)) != 0; }
};

// Throws InvalidArgument unless every limit is positive and consistent
// (maxWarpsPerSm * warpSize == maxThreadsPerSm, per-block limits within the SM's).
void validate(DeviceLimits const& d);

// Eqs. (1)-(7). Throws InvalidArgument for a malformed device (validate) or a kernel that cannot
// exist: threadsPerBlock < 1 or > maxThreadsPerBlock, registersPerThread < 0 or
// > maxRegistersPerThread, negative byte counts. A kernel that exists but cannot launch (too many
// registers or too much shared memory for one block) gets blocksPerSm = 0 and a reason.
OccupancyReport occupancy(DeviceLimits const& d, KernelResources const& k);

// One line: "2 blocks/SM (640 threads, 20 warps, 41.7%), limited by registers".
std::string describe(OccupancyReport const& r);

}  // namespace kortex
