// Kokkos kernels of the affine pre-alignment (entry points: gpu/affine/Affine.hpp). Functors keep only
// four Views (two images, two masks), the transform (AffineCoeffs, 120 B) and the extents: under the
// 512 B closure limit of CUDA.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <string>

#include "core/Affine.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Image.hpp"

namespace kortex::gpu::affine_detail {

template <class View>
void checkVolume(View const& v, const char* who) {
  if (v.data() == nullptr) throw InvalidArgument(std::string(who) + ": view is not allocated");
  for (int r = 0; r < 3; ++r)
    if (v.extent(r) < 2)
      throw InvalidArgument(std::string(who) + ": needs 3D images with every extent >= 2, got extents (" +
                            std::to_string(v.extent(0)) + "," + std::to_string(v.extent(1)) + "," +
                            std::to_string(v.extent(2)) + ")");
}

// The metric's sums in one fixed order that no team size or thread count changes: a unit is
// kMetricSegment consecutive voxels of one x-row, summed in x order in registers; a block is
// kMetricUnits consecutive units, summed in unit order in team scratch (stage 1: partials(k,
// block)); each sum k is then kMetricLanes lane sums (lane l: blocks l, l + kMetricLanes, ... in
// order) added in lane order (stage 2). Accumulating in registers, not in Kokkos's per-thread
// shared-memory array of kAffineSumCount doubles, is what makes it fast (the array reduction took
// ~140 us per evaluation on the H200, Nsight of issue 40).
inline constexpr int kMetricSegment = 16;
inline constexpr int kMetricUnits = 32;
inline constexpr int kMetricLanes = 64;

template <class Exec>
struct MetricPartialsFunctor {
  using Mem = typename Exec::memory_space;
  using Scratch = Kokkos::View<double**, Kokkos::LayoutRight, typename Exec::scratch_memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  ConstImageView<Mem> moving, fixed;
  ConstImageView<Mem> movingMask, fixedMask;  // binary; unallocated: every voxel counts
  Kokkos::View<double**, Kokkos::LayoutRight, Mem> partials;  // (kAffineSumCount, blocks)
  AffineCoeffs a;
  int nx, ny, mx, my, mz;  // fixed x, y extents; moving extents
  int segmentsPerRow;
  Index units;
  bool useMovingMask = false, useFixedMask = false;

  static std::size_t scratchBytes() { return Scratch::shmem_size(kMetricUnits, kAffineSumCount); }

  KOKKOS_INLINE_FUNCTION void unitSums(Index u, double* sums) const {
    const Index row = u / segmentsPerRow;
    const int x0 = static_cast<int>(u % segmentsPerRow) * kMetricSegment;
    const int x1 = x0 + kMetricSegment < nx ? x0 + kMetricSegment : nx;
    const int y = static_cast<int>(row % ny);
    const int z = static_cast<int>(row / ny);
    for (int x = x0; x < x1; ++x) {
      if (useFixedMask && fixedMask(z, y, x) == 0.0f) continue;
      const double pf[3] = {static_cast<double>(x), static_cast<double>(y), static_cast<double>(z)};
      double q[3], p[3];
      affineMap(a, pf, q, p);
      if (!affineInside(p, mx, my, mz)) continue;
      if (useMovingMask && !affineMaskHolds(movingMask, p)) continue;
      const double w = affineEdgeWeight(p, mx, my, mz);
      double g[3];
      const double m = affineSample(moving, p, g);
      affineAccumulate(sums, w, static_cast<double>(fixed(z, y, x)), m, g, q, true);
    }
  }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    Scratch unitSum(team.team_scratch(0), kMetricUnits, kAffineSumCount);
    const Index block = team.league_rank();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kMetricUnits), [&](const int j) {
      double sums[kAffineSumCount];
      KORTEX_UNROLL for (int k = 0; k < kAffineSumCount; ++k) sums[k] = 0.0;
      const Index u = block * kMetricUnits + j;
      if (u < units) unitSums(u, sums);
      KORTEX_UNROLL for (int k = 0; k < kAffineSumCount; ++k) unitSum(j, k) = sums[k];
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kAffineSumCount), [&](const int k) {
      double s = 0.0;
      for (int j = 0; j < kMetricUnits; ++j) s += unitSum(j, k);
      partials(k, block) = s;
    });
  }
};

template <class Exec>
struct MetricTotalsFunctor {
  using Mem = typename Exec::memory_space;
  using Scratch = Kokkos::View<double*, typename Exec::scratch_memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::View<const double**, Kokkos::LayoutRight, Mem> partials;
  Kokkos::View<double*, Mem> totals;

  static std::size_t scratchBytes() { return Scratch::shmem_size(kMetricLanes); }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    Scratch lane(team.team_scratch(0), kMetricLanes);
    const int k = team.league_rank();
    const int blocks = static_cast<int>(partials.extent(1));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kMetricLanes), [&](const int l) {
      double s = 0.0;
      for (int b = l; b < blocks; b += kMetricLanes) s += partials(k, b);
      lane(l) = s;
    });
    team.team_barrier();
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      double s = 0.0;
      for (int l = 0; l < kMetricLanes; ++l) s += lane(l);
      totals(k) = s;
    });
  }
};

// Device buffers of the metric for one fixed grid (a level): kept by the optimiser's back end so that
// an evaluation allocates nothing.
template <class Mem>
struct MetricWorkspace {
  Kokkos::View<double**, Kokkos::LayoutRight, Mem> partials;
  Kokkos::View<double*, Mem> totals;
  int segmentsPerRow = 0;
  Index units = 0;
};

template <class Exec>
MetricWorkspace<typename Exec::memory_space> metricWorkspace(Exec const& exec, std::size_t nz, std::size_t ny,
                                                             std::size_t nx) {
  MetricWorkspace<typename Exec::memory_space> w;
  w.segmentsPerRow = static_cast<int>((nx + kMetricSegment - 1) / kMetricSegment);
  w.units = static_cast<Index>(nz * ny) * w.segmentsPerRow;
  const Index blocks = (w.units + kMetricUnits - 1) / kMetricUnits;
  w.partials = decltype(w.partials)(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                                                       std::string("kortex::Affine::metricPartials")),
                                    kAffineSumCount, blocks);
  w.totals = decltype(w.totals)(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                                                   std::string("kortex::Affine::metricTotals")),
                                kAffineSumCount);
  return w;
}

template <class Mem>
struct ResampleFunctor {
  ConstImageView<Mem> moving;
  ImageView<Mem> out;
  AffineCoeffs a;
  int nx, ny, mx, my, mz;

  KOKKOS_INLINE_FUNCTION void operator()(const Index i) const {
    const int x = static_cast<int>(i % nx);
    const Index r = i / nx;
    const int y = static_cast<int>(r % ny);
    const int z = static_cast<int>(r / ny);
    const double pf[3] = {static_cast<double>(x), static_cast<double>(y), static_cast<double>(z)};
    double p[3];
    affineMap(a, pf, p);
    out(z, y, x) = affineInside(p, mx, my, mz)
                      ? static_cast<float>(affineSample(moving, p, static_cast<double*>(nullptr)))
                      : 0.0f;
  }
};

// The metric; with masks (binary, on the images' grids) only the voxels they hold count, and
// `fixedVoxels` is the fixed mask's count (0: every fixed voxel). `work` is metricWorkspace of the
// fixed grid.
template <class Exec>
AffineMetric metric(Exec const& exec, MetricWorkspace<typename Exec::memory_space> const& work,
                    ConstImageView<typename Exec::memory_space> moving,
                    ConstImageView<typename Exec::memory_space> fixed, AffineTransform const& t,
                    ConstImageView<typename Exec::memory_space> movingMask = {},
                    ConstImageView<typename Exec::memory_space> fixedMask = {}, Index fixedVoxels = 0) {
  using Mem = typename Exec::memory_space;
  using Policy = Kokkos::TeamPolicy<Exec>;
  checkVolume(moving, "affineMetric (moving)");
  checkVolume(fixed, "affineMetric (fixed)");
  MetricPartialsFunctor<Exec> f;
  f.moving = moving;
  f.fixed = fixed;
  f.movingMask = movingMask;
  f.fixedMask = fixedMask;
  f.partials = work.partials;
  f.useMovingMask = movingMask.data() != nullptr;
  f.useFixedMask = fixedMask.data() != nullptr;
  f.a = affineCoeffs(t);
  f.nx = static_cast<int>(fixed.extent(2));
  f.ny = static_cast<int>(fixed.extent(1));
  f.mx = static_cast<int>(moving.extent(2));
  f.my = static_cast<int>(moving.extent(1));
  f.mz = static_cast<int>(moving.extent(0));
  f.segmentsPerRow = work.segmentsPerRow;
  f.units = work.units;
  const std::size_t scratchMax = kx::scratchSizeMax<Policy>(0);
  if (MetricPartialsFunctor<Exec>::scratchBytes() > scratchMax || MetricTotalsFunctor<Exec>::scratchBytes() > scratchMax)
    throw InvalidArgument("affineMetric: the metric's team scratch (" +
                          std::to_string(MetricPartialsFunctor<Exec>::scratchBytes()) +
                          " bytes) exceeds the execution space's level-0 scratch (" + std::to_string(scratchMax) + ")");
  const int blocks = static_cast<int>(work.partials.extent(1));
  Policy probe(exec, blocks, 1);
  const int team = std::min(kMetricUnits, probe.team_size_max(f, Kokkos::ParallelForTag()));
  Kokkos::parallel_for("kortex::Affine::metricPartials",
                       Policy(exec, blocks, team)
                           .set_scratch_size(0, Kokkos::PerTeam(MetricPartialsFunctor<Exec>::scratchBytes())),
                       f);
  MetricTotalsFunctor<Exec> g{work.partials, work.totals};
  Policy probeTotals(exec, kAffineSumCount, 1);
  const int lanes = std::min(kMetricLanes, probeTotals.team_size_max(g, Kokkos::ParallelForTag()));
  Kokkos::parallel_for("kortex::Affine::metricTotals",
                       Policy(exec, kAffineSumCount, lanes)
                           .set_scratch_size(0, Kokkos::PerTeam(MetricTotalsFunctor<Exec>::scratchBytes())),
                       g);
  double sums[kAffineSumCount] = {};
  Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> result(sums, kAffineSumCount);
  Kokkos::deep_copy(exec, result, work.totals);
  exec.fence();
  return affineMetricFromSums(sums, fixedVoxels > 0 ? fixedVoxels : static_cast<Index>(fixed.size()));
}

template <class Exec>
void resample(Exec const& exec, ConstImageView<typename Exec::memory_space> moving, AffineTransform const& t,
              ImageView<typename Exec::memory_space> out) {
  using Mem = typename Exec::memory_space;
  checkVolume(moving, "resampleAffine (moving)");
  if (out.data() == nullptr || out.size() == 0)
    throw InvalidArgument("resampleAffine: output view is not allocated");
  const auto* a = reinterpret_cast<const char*>(moving.data());
  const auto* b = reinterpret_cast<const char*>(out.data());
  if (a < b + out.span() * sizeof(float) && b < a + moving.span() * sizeof(float))
    throw InvalidArgument("resampleAffine: input and output views must not overlap");
  ResampleFunctor<Mem> f;
  f.moving = moving;
  f.out = out;
  f.a = affineCoeffs(t);
  f.nx = static_cast<int>(out.extent(2));
  f.ny = static_cast<int>(out.extent(1));
  f.mx = static_cast<int>(moving.extent(2));
  f.my = static_cast<int>(moving.extent(1));
  f.mz = static_cast<int>(moving.extent(0));
  Kokkos::parallel_for("kortex::Affine::resample",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<Index>>(exec, 0, static_cast<Index>(out.size())), f);
}

// The optimiser's metric on `Exec`: each level's images copied once.
template <class Exec>
class Backend final : public AffineMetricBackend {
 public:
  using Mem = typename Exec::memory_space;
  explicit Backend(Exec const& exec) : exec_(exec) {}
  // Copies on exec_'s queue (no device-wide fence: pairs may run concurrently on other instances).
  void setImages(AffineLevelImages const& level) override {
    moving_ = onDevice(level.moving, "kortex::Affine::moving");
    fixed_ = onDevice(level.fixed, "kortex::Affine::fixed");
    movingMask_ = onDevice(level.movingMask, "kortex::Affine::movingMask");
    fixedMask_ = onDevice(level.fixedMask, "kortex::Affine::fixedMask");
    fixedVoxels_ = level.fixedVoxels;
    work_ = metricWorkspace(exec_, fixed_.extent(0), fixed_.extent(1), fixed_.extent(2));
    exec_.fence();
  }
  AffineMetric evaluate(AffineTransform const& t) override {
    return metric(exec_, work_, moving_, fixed_, t, movingMask_, fixedMask_, fixedVoxels_);
  }

 private:
  // A copy on exec_'s memory space (unallocated for an empty image).
  ImageView<Mem> onDevice(HostImage const& img, const char* label) const {
    if (img.data.data() == nullptr) return {};
    ImageView<Mem> d(Kokkos::view_alloc(exec_, Kokkos::WithoutInitializing, std::string(label)), img.data.extent(0),
                     img.data.extent(1), img.data.extent(2));
    Kokkos::deep_copy(exec_, d, img.data);
    return d;
  }

  Exec exec_;
  ImageView<Mem> moving_, fixed_, movingMask_, fixedMask_;
  Index fixedVoxels_ = 0;
  MetricWorkspace<Mem> work_;
};

}  // namespace kortex::gpu::affine_detail
