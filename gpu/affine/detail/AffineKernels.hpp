// Kokkos kernels of the affine pre-alignment (entry points: gpu/affine/Affine.hpp). Functors keep only
// four Views (two images, two masks), the transform (AffineCoeffs, 120 B) and the extents: under the
// 512 B closure limit of CUDA.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "core/Affine.hpp"
#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Image.hpp"
#include "gpu/detail/Common.hpp"

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

// The overlap voxels of a unit (kMetricSegment voxels of one x-row of the fixed grid): visit(w, f, m,
// g, q) for each voxel the fixed mask holds whose mapped point is inside the moving grid and held by
// the moving mask (core/Affine.hpp, "Metric"), in x order.
template <class Mem>
struct OverlapUnits {
  ConstImageView<Mem> moving, fixed;
  ConstImageView<Mem> movingMask, fixedMask;  // binary; unallocated: every voxel counts
  AffineCoeffs a;
  int nx, ny, mx, my, mz;  // fixed x, y extents; moving extents
  int segmentsPerRow;
  Index units;
  bool useMovingMask = false, useFixedMask = false;

  template <class Visit>
  KOKKOS_INLINE_FUNCTION void forVoxels(Index u, Visit const& visit) const {
    const Index row = u / segmentsPerRow;
    const int x0 = static_cast<int>(u % segmentsPerRow) * kMetricSegment;
    const int x1 = x0 + kMetricSegment < nx ? x0 + kMetricSegment : nx;
    const int y = static_cast<int>(row % ny);
    const int z = static_cast<int>(row / ny);
    for (int x = x0; x < x1; ++x) voxel(z, y, x, visit);
  }

  // The unit's i-th voxel alone (i < kMetricSegment), for kernels whose sums take any order.
  template <class Visit>
  KOKKOS_INLINE_FUNCTION void forVoxel(Index u, int i, Visit const& visit) const {
    const Index row = u / segmentsPerRow;
    const int x = static_cast<int>(u % segmentsPerRow) * kMetricSegment + i;
    if (x < nx) voxel(static_cast<int>(row / ny), static_cast<int>(row % ny), x, visit);
  }

  template <class Visit>
  KOKKOS_INLINE_FUNCTION void voxel(int z, int y, int x, Visit const& visit) const {
    if (useFixedMask && fixedMask(z, y, x) == 0.0f) return;
    const double pf[3] = {static_cast<double>(x), static_cast<double>(y), static_cast<double>(z)};
    double q[3], p[3];
    affineMap(a, pf, q, p);
    if (!affineInside(p, mx, my, mz)) return;
    if (useMovingMask && !affineMaskHolds(movingMask, p)) return;
    const double w = affineEdgeWeight(p, mx, my, mz);
    double g[3];
    const double m = affineSample(moving, p, g);
    visit(w, static_cast<double>(fixed(z, y, x)), m, g, q);
  }
};

// The sums of NCC (core/Affine.hpp sums layout).
struct NccSums {
  static constexpr int kSums = kAffineSumCount;
  KOKKOS_INLINE_FUNCTION void operator()(double* sums, double w, double f, double m, const double* g,
                                         const double* q) const {
    affineAccumulate(sums, w, f, m, g, q, true);
  }
};

// The 12 sums of MI's gradient: w (B - 4) h(x) dm/dtheta_k, h from the level's log ratios L.
template <class Mem>
struct MiGradientSums {
  static constexpr int kSums = 12;
  Kokkos::View<const double*, Mem> logRatio;  // bins x bins, row = fixed bin
  int bins;
  KOKKOS_INLINE_FUNCTION void operator()(double* sums, double w, double f, double m, const double* g,
                                         const double* q) const {
    const double h = miSlope(f, m, bins, logRatio);
    const double c = w * (bins - 4) * h;
    for (int r = 0; r < 3; ++r) {
      const double gr = c * g[r];
      sums[3 * r + 0] += gr * q[0];
      sums[3 * r + 1] += gr * q[1];
      sums[3 * r + 2] += gr * q[2];
      sums[9 + r] += gr;
    }
  }
};

// Stage 1 of a metric's sums (Op's kSums per voxel): partials(k, block).
template <class Exec, class Op>
struct MetricPartialsFunctor {
  using Mem = typename Exec::memory_space;
  using Scratch = Kokkos::View<double**, Kokkos::LayoutRight, typename Exec::scratch_memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  OverlapUnits<Mem> overlap;
  Op op;
  Kokkos::View<double**, Kokkos::LayoutRight, Mem> partials;  // (>= Op::kSums, blocks)

  static std::size_t scratchBytes() { return Scratch::shmem_size(kMetricUnits, Op::kSums); }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    Scratch unitSum(team.team_scratch(0), kMetricUnits, Op::kSums);
    const Index block = team.league_rank();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kMetricUnits), [&](const int j) {
      double sums[Op::kSums];
      KORTEX_UNROLL for (int k = 0; k < Op::kSums; ++k) sums[k] = 0.0;
      const Index u = block * kMetricUnits + j;
      if (u < overlap.units)
        overlap.forVoxels(u, [&](double w, double f, double m, const double* g, const double* q) { op(sums, w, f, m, g, q); });
      KORTEX_UNROLL for (int k = 0; k < Op::kSums; ++k) unitSum(j, k) = sums[k];
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Op::kSums), [&](const int k) {
      double s = 0.0;
      for (int j = 0; j < kMetricUnits; ++j) s += unitSum(j, k);
      partials(k, block) = s;
    });
  }
};

// Stage 2: totals(k) for the first league-size sums.
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

// MI's joint histogram in fixed point (core/Affine.hpp, "Mutual information"): hist(i B + k) +=
// llround(w beta3 2^kMiFixedBits), hist(B^2) += the overlap voxels. Integer sums: the same bits in any
// order, so a thread takes one voxel (a team kSlots of them: its block's units), not a unit as the
// double sums do (a unit per thread left the H200 at 3 % occupancy, 0.59 ms per histogram of a 2-mm
// pair: Nsight Compute, bench/results/ncu_mi_histogram_nvidia-h200.txt). With `useScratch` each team
// sums into a histogram in team scratch and adds its nonzero bins to `hist`; otherwise every voxel
// adds to `hist`.
template <class Exec>
struct MiHistogramFunctor {
  using Mem = typename Exec::memory_space;
  using Counts = Kokkos::View<unsigned long long*, typename Exec::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr int kSlots = kMetricUnits * kMetricSegment;
  OverlapUnits<Mem> overlap;
  Kokkos::View<unsigned long long*, Mem> hist;  // bins^2 + 1
  int bins;
  bool useScratch;

  static std::size_t scratchBytes(int bins) { return Counts::shmem_size(std::size_t(bins) * bins + 1); }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    const int cells = bins * bins + 1;
    Counts local;
    if (useScratch) {
      local = Counts(team.team_scratch(0), cells);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cells), [&](const int c) { local(c) = 0; });
      team.team_barrier();
    }
    auto add = [&](int cell, unsigned long long c) {
      if (useScratch)
        Kokkos::atomic_add(&local(cell), c);
      else
        Kokkos::atomic_add(&hist(cell), c);
    };
    const Index first = team.league_rank() * Index(kMetricUnits);
    unsigned long long inside = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, kSlots),
        [&](const int j, unsigned long long& n) {
          const Index u = first + j / kMetricSegment;
          if (u >= overlap.units) return;
          overlap.forVoxel(u, j % kMetricSegment, [&](double w, double f, double m, const double*, const double*) {
            ++n;
            miFixedPointCounts(f, m, w, bins, add);
          });
        },
        inside);
    if (!useScratch) {
      Kokkos::single(Kokkos::PerTeam(team), [&]() {
        if (inside != 0) Kokkos::atomic_add(&hist(cells - 1), inside);
      });
      return;
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cells - 1), [&](const int c) {
      if (local(c) != 0) Kokkos::atomic_add(&hist(c), local(c));
    });
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      if (inside != 0) Kokkos::atomic_add(&hist(cells - 1), inside);
    });
  }
};

// Device buffers of the metric for one fixed grid (a level): kept by the optimiser's back end so that
// an evaluation allocates nothing. MI's histogram and log ratios only where bins > 0.
template <class Mem>
struct MetricWorkspace {
  Kokkos::View<double**, Kokkos::LayoutRight, Mem> partials;
  Kokkos::View<double*, Mem> totals;
  Kokkos::View<double**, Kokkos::LayoutRight, Mem> batchTotals;  // (kAffineSpeculation, sums): metricMany
  Kokkos::View<unsigned long long*, Mem> hist;
  typename Kokkos::View<unsigned long long*, Mem>::HostMirror histHost;  // the histogram read back
  Kokkos::View<double*, Mem> logRatio;
  int segmentsPerRow = 0;
  Index units = 0;
  int bins = 0;
};

template <class Exec>
MetricWorkspace<typename Exec::memory_space> metricWorkspace(Exec const& exec, std::size_t nz, std::size_t ny,
                                                             std::size_t nx, int bins = 0) {
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
  w.batchTotals = decltype(w.batchTotals)(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                                                             std::string("kortex::Affine::metricBatchTotals")),
                                          kAffineSpeculation, kAffineSumCount);
  if (bins > 0) {
    w.bins = bins;
    w.hist = decltype(w.hist)(Kokkos::view_alloc(exec, std::string("kortex::Affine::miHistogram")),
                              std::size_t(bins) * bins + 1);
    w.histHost = Kokkos::create_mirror_view(Kokkos::HostSpace(), w.hist);
    w.logRatio = decltype(w.logRatio)(Kokkos::view_alloc(exec, std::string("kortex::Affine::miLogRatio")),
                                      std::size_t(bins) * bins);
  }
  return w;
}

// The overlap loop's data for `t` over these images.
template <class Mem>
OverlapUnits<Mem> overlapUnits(MetricWorkspace<Mem> const& work, ConstImageView<Mem> moving, ConstImageView<Mem> fixed,
                               AffineTransform const& t, ConstImageView<Mem> movingMask, ConstImageView<Mem> fixedMask) {
  checkVolume(moving, "affineMetric (moving)");
  checkVolume(fixed, "affineMetric (fixed)");
  OverlapUnits<Mem> o;
  o.moving = moving;
  o.fixed = fixed;
  o.movingMask = movingMask;
  o.fixedMask = fixedMask;
  o.useMovingMask = movingMask.data() != nullptr;
  o.useFixedMask = fixedMask.data() != nullptr;
  o.a = affineCoeffs(t);
  o.nx = static_cast<int>(fixed.extent(2));
  o.ny = static_cast<int>(fixed.extent(1));
  o.mx = static_cast<int>(moving.extent(2));
  o.my = static_cast<int>(moving.extent(1));
  o.mz = static_cast<int>(moving.extent(0));
  o.segmentsPerRow = work.segmentsPerRow;
  o.units = work.units;
  return o;
}

template <class Policy>
void checkScratch(std::size_t bytes, const char* what) {
  const std::size_t scratchMax = kx::scratchSizeMax<Policy>(0);
  if (bytes > scratchMax)
    throw InvalidArgument(std::string("affineMetric: the ") + what + "'s team scratch (" + std::to_string(bytes) +
                          " bytes) exceeds the execution space's level-0 scratch (" + std::to_string(scratchMax) + ")");
}

// Op's kSums sums over the overlap (both stages) into totals(0 .. kSums - 1), enqueued on exec.
template <class Exec, class Op>
void enqueueMetricSums(Exec const& exec, MetricWorkspace<typename Exec::memory_space> const& work,
                       OverlapUnits<typename Exec::memory_space> const& overlap, Op const& op,
                       Kokkos::View<double*, typename Exec::memory_space> const& totals) {
  using Policy = Kokkos::TeamPolicy<Exec>;
  using Partials = MetricPartialsFunctor<Exec, Op>;
  checkScratch<Policy>(Partials::scratchBytes(), "metric");
  checkScratch<Policy>(MetricTotalsFunctor<Exec>::scratchBytes(), "metric");
  const Partials f{overlap, op, work.partials};
  const int blocks = static_cast<int>(work.partials.extent(1));
  // lightWeight: the closure (the metric's images and coefficients) crosses 512 B.
  const int team = std::min(kMetricUnits, lightWeight(Policy(exec, blocks, 1)).team_size_max(f, Kokkos::ParallelForTag()));
  Kokkos::parallel_for("kortex::Affine::metricPartials",
                       lightWeight(Policy(exec, blocks, team)).set_scratch_size(0, Kokkos::PerTeam(Partials::scratchBytes())),
                       f);
  const MetricTotalsFunctor<Exec> g{work.partials, totals};
  const int lanes = std::min(kMetricLanes, Policy(exec, Op::kSums, 1).team_size_max(g, Kokkos::ParallelForTag()));
  Kokkos::parallel_for("kortex::Affine::metricTotals",
                       Policy(exec, Op::kSums, lanes)
                           .set_scratch_size(0, Kokkos::PerTeam(MetricTotalsFunctor<Exec>::scratchBytes())),
                       g);
}

// The same, copied to `sums` (fences).
template <class Exec, class Op>
void metricSums(Exec const& exec, MetricWorkspace<typename Exec::memory_space> const& work,
                OverlapUnits<typename Exec::memory_space> const& overlap, Op const& op, double* sums) {
  enqueueMetricSums(exec, work, overlap, op, work.totals);
  Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> result(sums, Op::kSums);
  Kokkos::deep_copy(exec, result, Kokkos::subview(work.totals, Kokkos::make_pair(0, Op::kSums)));
  exec.fence();
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
// fixed grid (with the bins for MI).
template <class Exec>
AffineMetric metric(Exec const& exec, MetricWorkspace<typename Exec::memory_space> const& work,
                    ConstImageView<typename Exec::memory_space> moving,
                    ConstImageView<typename Exec::memory_space> fixed, AffineTransform const& t,
                    ConstImageView<typename Exec::memory_space> movingMask = {},
                    ConstImageView<typename Exec::memory_space> fixedMask = {}, Index fixedVoxels = 0) {
  const auto overlap = overlapUnits(work, moving, fixed, t, movingMask, fixedMask);
  double sums[kAffineSumCount] = {};
  metricSums(exec, work, overlap, NccSums{}, sums);
  return affineMetricFromSums(sums, fixedVoxels > 0 ? fixedVoxels : static_cast<Index>(fixed.size()));
}

// NCC of several transforms (at most kAffineSpeculation): each one's sums enqueued in turn (the partials
// reused: exec runs them in order), read back once. Each metric is bit for bit what metric() gives.
template <class Exec>
void metricMany(Exec const& exec, MetricWorkspace<typename Exec::memory_space> const& work,
                ConstImageView<typename Exec::memory_space> moving, ConstImageView<typename Exec::memory_space> fixed,
                std::vector<AffineTransform> const& ts, ConstImageView<typename Exec::memory_space> movingMask,
                ConstImageView<typename Exec::memory_space> fixedMask, Index fixedVoxels, std::vector<AffineMetric>& out) {
  const std::size_t n = ts.size();
  if (n > work.batchTotals.extent(0))
    throw InvalidArgument("affineMetric: " + std::to_string(n) + " transforms at once, more than the workspace's " +
                          std::to_string(work.batchTotals.extent(0)));
  for (std::size_t i = 0; i < n; ++i)
    enqueueMetricSums(exec, work, overlapUnits(work, moving, fixed, ts[i], movingMask, fixedMask), NccSums{},
                      Kokkos::View<double*, typename Exec::memory_space>(
                          Kokkos::subview(work.batchTotals, i, Kokkos::ALL)));
  std::vector<double> sums(n * kAffineSumCount);
  Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
      sums.data(), n, kAffineSumCount);
  Kokkos::deep_copy(exec, host, Kokkos::subview(work.batchTotals, Kokkos::make_pair(std::size_t(0), n), Kokkos::ALL));
  exec.fence();
  out.clear();
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(affineMetricFromSums(&sums[i * kAffineSumCount],
                                       fixedVoxels > 0 ? fixedVoxels : static_cast<Index>(fixed.size())));
}

// Mattes MI (core/Affine.hpp, "Mutual information") with work.bins bins: the histogram, then p, MI
// and L on the host, then the gradient's sums (three kernels and two read-backs).
template <class Exec>
AffineMetric mutualInformation(Exec const& exec, MetricWorkspace<typename Exec::memory_space> const& work,
                               ConstImageView<typename Exec::memory_space> moving,
                               ConstImageView<typename Exec::memory_space> fixed, AffineTransform const& t,
                               ConstImageView<typename Exec::memory_space> movingMask = {},
                               ConstImageView<typename Exec::memory_space> fixedMask = {}, Index fixedVoxels = 0) {
  using Mem = typename Exec::memory_space;
  using Policy = Kokkos::TeamPolicy<Exec>;
  const int B = work.bins;
  validateMiBins(B);
  if (work.hist.data() == nullptr) throw InvalidArgument("mutual information: the workspace has no histogram");
  const auto overlap = overlapUnits(work, moving, fixed, t, movingMask, fixedMask);
  // The histogram: in team scratch on device back ends where it fits (host back ends add directly).
  const bool device = !Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;
  const bool useScratch = device && MiHistogramFunctor<Exec>::scratchBytes(B) <= kx::scratchSizeMax<Policy>(0);
  const MiHistogramFunctor<Exec> h{overlap, work.hist, B, useScratch};
  Kokkos::deep_copy(exec, work.hist, 0ull);
  const int blocks = static_cast<int>(work.partials.extent(1));
  const auto scratch = Kokkos::PerTeam(useScratch ? MiHistogramFunctor<Exec>::scratchBytes(B) : 0);
  auto histPolicy = [&](int team) { return lightWeight(Policy(exec, blocks, team)).set_scratch_size(0, scratch); };
  const int team = std::min(MiHistogramFunctor<Exec>::kSlots, histPolicy(1).team_size_max(h, Kokkos::ParallelForTag()));
  Kokkos::parallel_for("kortex::Affine::miHistogram", histPolicy(team), h);
  const auto hist = work.histHost;
  Kokkos::deep_copy(exec, hist, work.hist);
  exec.fence();

  AffineMetric r;
  const Index inside = static_cast<Index>(hist(std::size_t(B) * B));
  r.count = inside;
  r.overlap = double(inside) / double(fixedVoxels > 0 ? fixedVoxels : static_cast<Index>(fixed.size()));
  unsigned long long total = 0;
  for (std::size_t c = 0; c < std::size_t(B) * B; ++c) total += hist(c);
  if (total == 0) return r;
  std::vector<double> p(std::size_t(B) * B), logRatio;
  for (std::size_t c = 0; c < p.size(); ++c) p[c] = double(hist(c)) / double(total);
  r.value = miFromHistogram(p, B, logRatio);
  Kokkos::View<const double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> lr(logRatio.data(), logRatio.size());
  Kokkos::deep_copy(exec, work.logRatio, lr);
  double sums[12] = {};
  metricSums(exec, work, overlap, MiGradientSums<Mem>{work.logRatio, B}, sums);
  const double W = double(total) / double(1ll << kMiFixedBits);
  for (int k = 0; k < 12; ++k) r.gradient[std::size_t(k)] = sums[k] / W;
  return r;
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

// The pyramid's binomial (core/Affine.hpp "Pyramid", affineBinomial5) along one axis, sampled every
// `stride` voxels: out(z, y, x) from in's five clamped taps around stride * (x, y or z) + 0. The
// passes x, y (double) then z (to float) give the host's binomial bit for bit.
template <class In, class Out>
struct BinomialAxisFunctor {
  In in;
  Out out;
  int axis, stride, n;  // n: in's extent along `axis`
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    int c[3] = {z, y, x};
    const int a = 2 - axis;  // axis 0 = x = the last index
    const int base = stride * c[a];
    double v[5];
    for (int m = 0; m < 5; ++m) {
      c[a] = clampIndex(base + m - 2, n);
      v[m] = double(in(c[0], c[1], c[2]));
    }
    out(z, y, x) = static_cast<typename Out::value_type>(affineBinomial5(v[0], v[1], v[2], v[3], v[4]));
  }
};

// out = the binomial of `in` sampled every `stride` voxels (1: smooth, 2: reduce); tx, ty: double
// workspaces of at least in's voxels.
template <class Exec, class Mem = typename Exec::memory_space>
void binomial(Exec const& exec, ConstImageView<Mem> in, int stride, Kokkos::View<double*, Mem> tx,
              Kokkos::View<double*, Mem> ty, ImageView<Mem> out) {
  using Doubles = Kokkos::View<double***, Kokkos::LayoutRight, Mem, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const int nz = int(in.extent(0)), ny = int(in.extent(1)), nx = int(in.extent(2));
  const int cz = int(out.extent(0)), cy = int(out.extent(1)), cx = int(out.extent(2));
  const Doubles x(tx.data(), nz, ny, cx), y(ty.data(), nz, cy, cx);
  parallelForVoxels("kortex::Affine::binomial_x", exec, nz, ny, cx,
                    BinomialAxisFunctor<ConstImageView<Mem>, Doubles>{in, x, 0, stride, nx});
  parallelForVoxels("kortex::Affine::binomial_y", exec, nz, cy, cx, BinomialAxisFunctor<Doubles, Doubles>{x, y, 1, stride, ny});
  parallelForVoxels("kortex::Affine::binomial_z", exec, cz, cy, cx,
                    BinomialAxisFunctor<Doubles, ImageView<Mem>>{y, out, 2, stride, nz});
}

// The metric's images of every level (core/Affine.hpp "Pyramid") from the level-0 image, built on
// exec: level l+1 = reduce(level l), each smoothed once more. tx, ty: double workspaces of at least
// the image's voxels.
template <class Exec, class Mem = typename Exec::memory_space>
std::vector<ImageView<Mem>> smoothedPyramid(Exec const& exec, HostImage const& image, int levels, Kokkos::View<double*, Mem> tx,
                                            Kokkos::View<double*, Mem> ty, const char* label) {
  auto alloc = [&](std::string const& what, Geometry const& g) {
    return ImageView<Mem>(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, std::string(label) + what), g.nz(), g.ny(),
                          g.nx());
  };
  Geometry g = image.geometry;
  ImageView<Mem> level = alloc("_level", g);
  Kokkos::deep_copy(exec, level, image.data);
  std::vector<ImageView<Mem>> out;
  for (int l = 0; l < levels; ++l) {
    if (l > 0) {
      const Geometry next = affineReducedGeometry(g);
      ImageView<Mem> reduced = alloc("_level", next);
      binomial(exec, ConstImageView<Mem>(level), 2, tx, ty, reduced);
      level = reduced;
      g = next;
    }
    out.push_back(alloc("_smoothed", g));
    binomial(exec, ConstImageView<Mem>(level), 1, tx, ty, out.back());
  }
  return out;
}

// The pyramids of images (each smoothedPyramid's), built with one pair of double workspaces.
template <class Exec, class Mem = typename Exec::memory_space>
std::vector<std::vector<ImageView<Mem>>> smoothedPyramids(Exec const& exec, std::vector<HostImage const*> const& images,
                                                          int levels, std::vector<const char*> const& labels) {
  std::size_t n = 0;
  for (HostImage const* image : images) n = std::max(n, std::size_t(image->numVoxels()));
  auto work = [&](const char* label) {
    return Kokkos::View<double*, Mem>(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, std::string(label)), n);
  };
  const Kokkos::View<double*, Mem> tx = work("kortex::Affine::binomial_x"), ty = work("kortex::Affine::binomial_y");
  std::vector<std::vector<ImageView<Mem>>> out;
  for (std::size_t i = 0; i < images.size(); ++i) out.push_back(smoothedPyramid(exec, *images[i], levels, tx, ty, labels[i]));
  return out;
}

// The optimiser's metric on `Exec`: the pyramid built there from the level-0 images (setPyramid).
template <class Exec>
class Backend final : public AffineMetricBackend {
 public:
  using Mem = typename Exec::memory_space;
  explicit Backend(Exec const& exec) : exec_(exec) {}
  // Copies on exec_'s queue (no device-wide fence: pairs may run concurrently on other instances).
  bool setPyramid(HostImage const& moving, HostImage const& fixed, int levels) override {
    auto both = smoothedPyramids(exec_, {&moving, &fixed}, levels, {"kortex::Affine::moving", "kortex::Affine::fixed"});
    movingLevels_ = std::move(both[0]);
    fixedLevels_ = std::move(both[1]);
    return true;
  }
  // The level's images are setPyramid's (this back end builds the pyramid).
  void setImages(AffineLevelImages const& level) override {
    moving_ = movingLevels_.at(std::size_t(level.level));
    fixed_ = fixedLevels_.at(std::size_t(level.level));
    movingMask_ = onDevice(level.movingMask, "kortex::Affine::movingMask");
    fixedMask_ = onDevice(level.fixedMask, "kortex::Affine::fixedMask");
    fixedVoxels_ = level.fixedVoxels;
    metric_ = level.metric;
    work_ = metricWorkspace(exec_, fixed_.extent(0), fixed_.extent(1), fixed_.extent(2),
                            level.metric == AffineMetricKind::Mi ? level.miBins : 0);
    exec_.fence();
  }
  AffineMetric evaluate(AffineTransform const& t) override {
    if (metric_ == AffineMetricKind::Mi)
      return mutualInformation(exec_, work_, moving_, fixed_, t, movingMask_, fixedMask_, fixedVoxels_);
    return metric(exec_, work_, moving_, fixed_, t, movingMask_, fixedMask_, fixedVoxels_);
  }
  // NCC: the transforms' sums enqueued together and read back once; MI one after another.
  void evaluateMany(std::vector<AffineTransform> const& ts, std::vector<AffineMetric>& out) override {
    if (metric_ == AffineMetricKind::Mi || ts.size() < 2) {
      AffineMetricBackend::evaluateMany(ts, out);
      return;
    }
    metricMany(exec_, work_, moving_, fixed_, ts, movingMask_, fixedMask_, fixedVoxels_, out);
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
  std::vector<ImageView<Mem>> movingLevels_, fixedLevels_;  // setPyramid's, the metric's images
  ImageView<Mem> moving_, fixed_, movingMask_, fixedMask_;
  Index fixedVoxels_ = 0;
  MetricWorkspace<Mem> work_;
  AffineMetricKind metric_ = AffineMetricKind::Ncc;
};

}  // namespace kortex::gpu::affine_detail
