// Reference numbers of the paper "Efficient Mapping of Multiresolution Image Filtering Algorithms
// on Graphics Processors" (Membarth et al.; NVIDIA Tesla C870, Xeon quad-core with OpenMP), as
// quoted in Kortex issue 3, and the performance targets. These are the ONLY constants
// `kortex bench multires` prints that it did not measure; every table labels them as the paper's
// (or as targets).
#pragma once

namespace kortex::bench::paper_multires {

inline constexpr const char* kDevice = "NVIDIA Tesla C870";
inline constexpr const char* kCpu = "Intel Xeon quad-core, OpenMP (4 threads)";
inline constexpr const char* kCitation =
    "Membarth et al., Efficient Mapping of Multiresolution Image Filtering Algorithms on Graphics "
    "Processors (Figs 4-6, Table 2), Tesla C870";

// Fig 4: bilateral kernel throughput (sigma_d = 2, 5x5 window), GFLOPS.
inline constexpr double kFig4LutIntrinsicsGflops = 63.0;    // closeness LUT + fast-math intrinsics
inline constexpr double kFig4NaiveIntrinsicsGflops = 80.0;  // no LUT, fast-math intrinsics

// Fig 5: the expand operator at 512^2 (ms): unfused (upsample, lowpass, scale kernels) ->
// merged into one kernel -> merged with the two outputs per thread buffered in shared memory
// for coalesced writes; and the whole decompose / reconstruct phases, unfused -> fused + shared.
inline constexpr int kFig5Size = 512;
inline constexpr double kFig5ExpandUnfusedMs = 0.38;
inline constexpr double kFig5ExpandFusedMs = 0.19;
inline constexpr double kFig5ExpandFusedSharedMs = 0.09;
inline constexpr double kFig5DecomposeUnfusedMs = 4.36;
inline constexpr double kFig5DecomposeFusedSharedMs = 0.20;
inline constexpr double kFig5ReconstructUnfusedMs = 2.29;
inline constexpr double kFig5ReconstructFusedSharedMs = 0.10;

// Fig 6: configuration-space exploration of the bilateral kernel (1024^2, sigma_d = 2).
inline constexpr int kFig6Size = 1024;
inline constexpr int kFig6Configurations = 3280;  // 2D tiles explored
inline constexpr int kFig6Relevant = 119;         // once a row holds >= 16 elements (coalescing)
inline constexpr const char* kFig6BestC870 = "64x1";
inline constexpr const char* kFig6Best8400 = "32x6";  // GeForce 8400
inline constexpr double kFig6BestVs16x16Percent = 10.3;  // best is 10.3% faster than 16x16
inline constexpr double kFig6BestVsWorstPercent = 30.0;  // and > 30% faster than the worst coalesced

// Table 2 (sigma_d = 2): frames per second, CPU (4 threads) / GPU, and the GPU speedup.
struct Table2Row {
  int size;  // size x size
  double cpuFps;
  double gpuFps;
  double speedup;
};
inline constexpr Table2Row kTable2[] = {{512, 17.29, 382.13, 22.09},
                                        {1024, 4.64, 130.99, 28.17},
                                        {2048, 1.08, 36.17, 33.24},
                                        {4096, 0.11, 2.32, 21.05}};
inline constexpr int kTable2CpuThreads = 4;

inline const Table2Row* findTable2(int size) {
  for (auto const& r : kTable2)
    if (r.size == size) return &r;
  return nullptr;
}

// Issue 3 targets on an NVIDIA H100/H200: end to end, image already on the device.
struct Target {
  const char* name;
  int size;
  double maxMs;  // <=> minimum FPS = 1000 / maxMs
};
inline constexpr Target kTargets[] = {{"multires 4096^2 end to end >= 1000 FPS", 4096, 1.0},
                                      {"multires 2048^2 end to end >= 3000 FPS", 2048, 1.0 / 3.0}};

}  // namespace kortex::bench::paper_multires
