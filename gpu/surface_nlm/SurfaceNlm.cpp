// Kokkos surface NLM: the entry point (band, records, multi-pass search, exact re-rank and
// certificate, exact fallback, weights, iterations) and its explicit instantiations for every
// enabled execution space. Kernels of the search: gpu/surface_nlm/detail/SurfaceNlmKernels.hpp.
#include "gpu/surface_nlm/SurfaceNlm.hpp"

#include <Kokkos_Sort.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

#include "core/Backend.hpp"
#include "core/Timing.hpp"
#include "core/Errors.hpp"
#include "gpu/detail/Common.hpp"
#include "gpu/surface_nlm/detail/SurfaceNlmKernels.hpp"

namespace kortex::gpu {

using namespace surface_nlm_detail;

namespace {


// Candidate sub-chunk of ScratchBroadcast and Pruned: as many patches as level-0 scratch holds, at
// most 64 (H200, n = 5: 64 x 512 B = 32 KB per team; 2 teams of 128 threads per SM by registers
// anyway). `bytes(c)` is the kernel's scratch for c candidates.
template <class Exec, class Bytes>
int scratchChunk(int paddedVoxels, Bytes const& bytes) {
  const std::size_t maxBytes = kx::scratchSizeMax<Kokkos::TeamPolicy<Exec>>(0);
  int c = 64;
  while (c > 1 && bytes(c) > maxBytes) --c;
  if (bytes(c) > maxBytes)
    throw InvalidArgument("kortex::gpu::surfaceDenoise: one patch record (" +
                          std::to_string(paddedVoxels * 4) + " B) does not fit this execution space's team scratch (" +
                          std::to_string(maxBytes) + " B)");
  return c;
}

// Queries per team of ScratchBroadcast: one per thread on a GPU (128 threads: 4 warps share a
// scratch chunk); on host spaces the team is one thread that loops over 32 queries per chunk.
template <class Exec>
constexpr bool onHost = Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible;

template <int PV4, class Exec>
void searchPass(Exec const& exec, SurfaceNlmVariant variant, ConstRecords<typename Exec::memory_space> patches,
                SearchState<typename Exec::memory_space> const& state, std::int32_t b, std::int32_t e,
                std::int64_t n) {
  switch (variant) {
    case SurfaceNlmVariant::Global: {
      SearchDirect<PV4, GlobalRead, Exec> f{patches, state, b, e};
      Kokkos::parallel_for("kortex::SurfaceNlm::Global::search",
                           Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, n), f);
      return;
    }
    case SurfaceNlmVariant::RandomAccess: {
      SearchDirect<PV4, ReadOnlyRead, Exec> f{patches, state, b, e};
      Kokkos::parallel_for("kortex::SurfaceNlm::RandomAccess::search",
                           Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, n), f);
      return;
    }
    case SurfaceNlmVariant::ScratchBroadcast: {
      const int P = static_cast<int>(patches.extent(1));
      const int chunk = scratchChunk<Exec>(P, [&](int c) { return SearchScratch<PV4, Exec>::scratchBytes(c, P); });
      const int qpt = onHost<Exec> ? 32 : 128;
      const int teamSize = onHost<Exec> ? 1 : 128;
      SearchScratch<PV4, Exec> f{patches, state, b, e, n, qpt, chunk};
      const int league = static_cast<int>((n + qpt - 1) / qpt);
      Kokkos::TeamPolicy<Exec> policy(exec, league, teamSize);
      policy.set_scratch_size(0, Kokkos::PerTeam(SearchScratch<PV4, Exec>::scratchBytes(chunk, P)));
      Kokkos::parallel_for("kortex::SurfaceNlm::ScratchBroadcast::search", policy, f);
      return;
    }
    case SurfaceNlmVariant::Pruned:
    case SurfaceNlmVariant::PrunedBlocks: break;  // prunedSearch
  }
  throw InvalidArgument("kortex::gpu::surfaceDenoise: the pruned searches have no candidate passes");
}

// Teams of the Pruned search per kernel launch (the progress bar ticks per launch): 2048 teams of
// 128 = 262k queries, so one launch up to N = 262k (H200: 264 teams resident at once).
constexpr std::int64_t kPrunedTeamsPerLaunch = 2048;

// The Pruned (PrunedBlocks when Blocks) search after the seed pass: patch sums (and block sums), the
// sorted order, then the teams. Returns the kernel launches; adds the candidate distances it computed
// to `evaluatedPairs`.
template <int PV4, bool Blocks, class Exec>
int prunedSearch(Exec const& exec, ConstRecords<typename Exec::memory_space> patches,
                 SearchState<typename Exec::memory_space> const& state, std::int64_t n, int pv,
                 SurfaceNlmProgress const& progress, std::int64_t& evaluatedPairs) {
  using Mem = typename Exec::memory_space;
  using Range = Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>;
  using Search = SearchPruned<PV4, Exec, Blocks>;
  using Layout = SurfaceNlmBlocks<PV4>;
  constexpr int kB = Search::kB;
  Kokkos::View<double*, Mem> sums(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::Pruned::sums"), n);
  Kokkos::View<float**, Kokkos::LayoutRight, Mem> blocks(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::PrunedBlocks::blocks"), Blocks ? n : 0, kB);
  double maxAbsSum = 0.0;
  Kokkos::parallel_reduce(
      "kortex::SurfaceNlm::Pruned::sums", Range(exec, 0, n),
      KOKKOS_LAMBDA(const std::int64_t j, double& mx) {
        // A plain if (nvcc refuses an extended lambda's captures inside a constexpr-if); the block width a
        // literal of the type, not a captured local.
        double s = 0.0, a = 0.0, t = 0.0;
        for (int k = 0; k < pv; ++k) {
          const double v = patches(j, k);
          s += v;
          a += kx::fabs(v);
          if (Blocks) {
            t += v;
            if (k % (4 * Layout::kWidth4) == 4 * Layout::kWidth4 - 1 || k == pv - 1) {
              blocks(j, k / (4 * Layout::kWidth4)) = static_cast<float>(t);
              t = 0.0;
            }
          }
        }
        sums(j) = s;
        if (a > mx) mx = a;
      },
      Kokkos::Max<double>(maxAbsSum));
  Kokkos::View<std::uint64_t*, Mem> order(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::Pruned::order"), n);
  Kokkos::parallel_for(
      "kortex::SurfaceNlm::Pruned::keys", Range(exec, 0, n),
      KOKKOS_LAMBDA(const std::int64_t j) { order(j) = sumKey(sums(j), static_cast<std::int32_t>(j)); });
  exec.fence();
  Kokkos::sort(order);  // the space's default instance (the only form Kokkos 3.4 has); fenced
  Kokkos::fence();
  Kokkos::View<std::int64_t*, Mem> evaluated("kortex::SurfaceNlm::Pruned::evaluated", n);

  const int P = static_cast<int>(patches.extent(1));
  const int chunk = scratchChunk<Exec>(P, [&](int c) { return Search::scratchBytes(c, P); });
  const int qpt = onHost<Exec> ? 32 : 128;
  const int teamSize = onHost<Exec> ? 1 : 128;
  const std::int64_t teams = (n + qpt - 1) / qpt;
  const int launches = static_cast<int>((teams + kPrunedTeamsPerLaunch - 1) / kPrunedTeamsPerLaunch);
  for (int li = 0; li < launches; ++li) {
    const std::int64_t first = li * kPrunedTeamsPerLaunch;
    const std::int64_t league = std::min<std::int64_t>(kPrunedTeamsPerLaunch, teams - first);
    Search f{patches, state, order, sums, blocks, evaluated, n, qpt, chunk, first, pv,
             surfaceNlmSumError(maxAbsSum, pv)};
    if constexpr (Blocks) {
      f.blockMargin = surfaceNlmBlockMargin(maxAbsSum);
      for (int b = 0; b < kB; ++b) f.invN[b] = 1.0f / static_cast<float>(Layout::voxels(b, pv));
    }
    Kokkos::TeamPolicy<Exec> policy(exec, static_cast<int>(league), teamSize);
    policy.set_scratch_size(0, Kokkos::PerTeam(Search::scratchBytes(chunk, P)));
    Kokkos::parallel_for(Blocks ? "kortex::SurfaceNlm::PrunedBlocks::search" : "kortex::SurfaceNlm::Pruned::search",
                         policy, f);
    if (progress) {
      exec.fence();
      progress({"search", li + 1, launches});
    }
  }
  std::int64_t total = 0;
  Kokkos::parallel_reduce(
      "kortex::SurfaceNlm::Pruned::evaluatedSum", Range(exec, 0, n),
      KOKKOS_LAMBDA(const std::int64_t j, std::int64_t& s) { s += evaluated(j); }, total);
  evaluatedPairs += total;
  return launches;
}

template <int PV4, class Exec>
void seedPass(Exec const& exec, ConstRecords<typename Exec::memory_space> patches,
              SearchState<typename Exec::memory_space> const& state, std::int64_t n) {
  if constexpr (onHost<Exec>) {
    SearchSeed<PV4, Exec> f{patches, state, n};
    Kokkos::parallel_for("kortex::SurfaceNlm::seed",
                         Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, n), f);
  } else {
    const int P = static_cast<int>(patches.extent(1));
    const int chunk = scratchChunk<Exec>(P, [&](int c) { return SearchSeedScratch<PV4, Exec>::scratchBytes(c, P); });
    constexpr int kTeam = 128;
    SearchSeedScratch<PV4, Exec> f{patches, state, n, chunk};
    Kokkos::TeamPolicy<Exec> policy(exec, static_cast<int>((n + kTeam - 1) / kTeam), kTeam);
    policy.set_scratch_size(0, Kokkos::PerTeam(SearchSeedScratch<PV4, Exec>::scratchBytes(chunk, P)));
    Kokkos::parallel_for("kortex::SurfaceNlm::seed", policy, f);
  }
}

template <class Exec>
void seedPassAny(Exec const& exec, int patch, ConstRecords<typename Exec::memory_space> patches,
                 SearchState<typename Exec::memory_space> const& s, std::int64_t n) {
  switch (patch) {
    case 1: seedPass<1>(exec, patches, s, n); return;
    case 3: seedPass<7>(exec, patches, s, n); return;
    case 5: seedPass<32>(exec, patches, s, n); return;
    case 7: seedPass<86>(exec, patches, s, n); return;
    default: throw InvalidArgument("kortex::gpu::surfaceDenoise: patch size " + std::to_string(patch) + " unsupported");
  }
}

template <bool Blocks, class Exec>
int prunedSearchAny(Exec const& exec, int patch, ConstRecords<typename Exec::memory_space> patches,
                    SearchState<typename Exec::memory_space> const& s, std::int64_t n, int pv,
                    SurfaceNlmProgress const& progress, std::int64_t& evaluatedPairs) {
  switch (patch) {
    case 1: return prunedSearch<1, Blocks>(exec, patches, s, n, pv, progress, evaluatedPairs);
    case 3: return prunedSearch<7, Blocks>(exec, patches, s, n, pv, progress, evaluatedPairs);
    case 5: return prunedSearch<32, Blocks>(exec, patches, s, n, pv, progress, evaluatedPairs);
    case 7: return prunedSearch<86, Blocks>(exec, patches, s, n, pv, progress, evaluatedPairs);
    default: throw InvalidArgument("kortex::gpu::surfaceDenoise: patch size " + std::to_string(patch) + " unsupported");
  }
}

template <class Exec>
void searchPassAny(Exec const& exec, int patch, SurfaceNlmVariant variant,
                   ConstRecords<typename Exec::memory_space> patches, SearchState<typename Exec::memory_space> const& s,
                   std::int32_t b, std::int32_t e, std::int64_t n) {
  switch (patch) {
    case 1: searchPass<1>(exec, variant, patches, s, b, e, n); return;    // 1 voxel, padded to 4
    case 3: searchPass<7>(exec, variant, patches, s, b, e, n); return;    // 27 -> 28
    case 5: searchPass<32>(exec, variant, patches, s, b, e, n); return;   // 125 -> 128
    case 7: searchPass<86>(exec, variant, patches, s, b, e, n); return;   // 343 -> 344
    default: throw InvalidArgument("kortex::gpu::surfaceDenoise: patch size " + std::to_string(patch) + " unsupported");
  }
}

}  // namespace

std::int64_t surfaceNlmBytes(std::int64_t n, SurfaceNlmParams const& params) {
  const std::int64_t pv = std::int64_t(params.patch) * params.patch * params.patch;
  const std::int64_t P = paddedPatch(static_cast<int>(pv));
  const std::int64_t kept = std::int64_t(params.neighbors) + kSurfaceNlmExtraCandidates;
  const std::int64_t m = params.neighbors;
  // ids, records, float list + indices + exact distances, count + failures, weights, phi twice;
  // Pruned: sums, order, evaluated and the sort's temporary copy of the order; PrunedBlocks: + at most
  // 8 block sums.
  const std::int64_t pruned = params.variant == SurfaceNlmVariant::Pruned        ? 8 + 8 + 8 + 8
                              : params.variant == SurfaceNlmVariant::PrunedBlocks ? 8 + 8 + 8 + 8 + 8 * 4
                                                                                  : 0;
  return n * (8 + P * 4 + kept * (4 + 4 + 8) + 4 + 4 + m * 8 + 2 * 8 + pruned);
}

namespace {

template <class Exec>
using Range64 = Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>;

// The band |phi| <= band in increasing linear index (n elements) and its patch records, zero
// padded to P floats (clamp rule at the volume's faces).
template <class Exec>
void bandRecords(Exec const& exec, ConstImageView<typename Exec::memory_space> phi, SurfaceNlmParams const& params,
                 std::int64_t n, Kokkos::View<std::int64_t*, typename Exec::memory_space>& ids,
                 Records<typename Exec::memory_space>& patches) {
  using Mem = typename Exec::memory_space;
  using Range = Range64<Exec>;
  const int nz = static_cast<int>(phi.extent(0)), ny = static_cast<int>(phi.extent(1)),
            nx = static_cast<int>(phi.extent(2));
  const std::int64_t total = static_cast<std::int64_t>(phi.size());
  const float* phiData = phi.data();
  const float band = params.band;
  const int pv = params.patch * params.patch * params.patch;
  const int P = paddedPatch(pv);
  const int h = (params.patch - 1) / 2;
  // Band, in increasing linear index.
  const Kokkos::View<std::int64_t*, Mem> ids_(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::ids"), n);
  Kokkos::parallel_scan(
      "kortex::SurfaceNlm::band", Range(exec, 0, total),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& pos, const bool final) {
        if (kx::fabs(phiData[i]) <= band) {
          if (final) ids_(pos) = i;
          ++pos;
        }
      });

  // Records.
  const Records<Mem> patches_(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::records"), n, P);
  Kokkos::parallel_for(
      "kortex::SurfaceNlm::records", Range(exec, 0, n * P), KOKKOS_LAMBDA(const std::int64_t t) {
        const std::int64_t j = t / P;
        const int k = static_cast<int>(t % P);
        if (k >= pv) {
          patches_(j, k) = 0.0f;
          return;
        }
        const int n1 = 2 * h + 1;
        const int ox = k % n1 - h, oy = (k / n1) % n1 - h, oz = k / (n1 * n1) - h;
        const std::int64_t id = ids_(j);
        const int x = static_cast<int>(id % nx), y = static_cast<int>((id / nx) % ny),
                  z = static_cast<int>(id / (static_cast<std::int64_t>(nx) * ny));
        const int cx = clampIndex(x + ox, nx), cy = clampIndex(y + oy, ny), cz = clampIndex(z + oz, nz);
        patches_(j, k) = phiData[(static_cast<std::int64_t>(cz) * ny + cy) * nx + cx];
      });
  ids = ids_;
  patches = patches_;
}

// The m nearest records of every element (listI, rows in the spec's order, exact distances in
// exactD): the seed pass, the search passes of the variant (or the pruned scan), the exact
// re-rank of the m' kept with its certificate, and the exact search of the elements whose
// certificate failed.
struct SearchSummary {
  int passes = 0;
  std::int64_t evaluatedPairs = 0;
  std::int32_t certificateFailures = 0;
  double seedSeconds = 0.0;
};

template <class ExecSpace>
SearchSummary searchNeighbours(ExecSpace const& exec, ConstRecords<typename ExecSpace::memory_space> patches,
                               SurfaceNlmParams const& params, std::int64_t n, SearchState<typename ExecSpace::memory_space>& state,
                               ListD<typename ExecSpace::memory_space>& exactD, SurfaceNlmProgress const& progress,
                               std::chrono::steady_clock::time_point t0) {
  using Mem = typename ExecSpace::memory_space;
  using Range = Range64<ExecSpace>;
  const int m = params.neighbors;
  const int pv = params.patch * params.patch * params.patch;
  const int kept = surfaceNlmKept(n, m);
  // Multi-pass float pre-selection.
  state.listD = ListF<Mem>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::listD"), n, kept);
  state.listI = ListI<Mem>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::listI"), n, kept);
  state.count = Kokkos::View<int*, Mem>("kortex::SurfaceNlm::count", n);
  state.kept = kept;
  state.seed = params.seedRadius;
  seedPassAny(exec, params.patch, patches, state, n);
  exec.fence();
  const double seedSeconds = secondsSince(t0);
  // Distances of the seed window (each element against its band neighbours j +- seed).
  std::int64_t evaluatedPairs = 0;
  for (std::int64_t j = 0; j < n; ++j)
    evaluatedPairs += std::min<std::int64_t>(j + state.seed, n - 1) - std::max<std::int64_t>(j - state.seed, 0);
  int passes = 0;
  if (params.variant == SurfaceNlmVariant::Pruned) {
    passes = prunedSearchAny<false>(exec, params.patch, patches, state, n, pv, progress, evaluatedPairs);
  } else if (params.variant == SurfaceNlmVariant::PrunedBlocks) {
    passes = prunedSearchAny<true>(exec, params.patch, patches, state, n, pv, progress, evaluatedPairs);
  } else {
    const std::int64_t perPass = params.passCandidates;
    passes = static_cast<int>((n + perPass - 1) / perPass);
    for (int p = 0; p < passes; ++p) {
      const std::int32_t b = static_cast<std::int32_t>(p * perPass);
      const std::int32_t e = static_cast<std::int32_t>(std::min<std::int64_t>(n, (p + 1) * perPass));
      searchPassAny(exec, params.patch, params.variant, patches, state, b, e, n);
      if (progress) {
        exec.fence();
        progress({"search", p + 1, passes});
      }
    }
    evaluatedPairs += n * n;  // every pass computes every (element, candidate) pair of its chunk
  }

  // Exact re-rank of the m' kept, certificate, list of failures.
  exactD = ListD<Mem>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::exactD"), n, kept);
  const auto exactD_ = exactD;
  Kokkos::View<std::int32_t*, Mem> failures(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::failures"), n);
  Kokkos::View<std::int32_t, Mem> failCount("kortex::SurfaceNlm::failCount");
  {
    Rerank<ExecSpace> f{patches, state.listD, state.listI, exactD_, failures, failCount, kept, m, pv, kept == n - 1};
    Kokkos::TeamPolicy<ExecSpace> policy(exec, static_cast<int>(n), onHost<ExecSpace> ? 1 : 128);
    policy.set_scratch_size(0, Kokkos::PerTeam(Rerank<ExecSpace>::scratchBytes(kept, pv)));
    Kokkos::parallel_for("kortex::SurfaceNlm::rerank", policy, f);
  }
  std::int32_t nFail = 0;
  Kokkos::deep_copy(nFail, failCount);
  if (progress) progress({"rerank", 1, 1});
  if (nFail > 0) {
    // Exact all-pairs search of the failed elements (double; candidates in increasing index, so
    // a strict comparison keeps the smaller index first among equal D).
    const ListI<Mem> listI = state.listI;
    const double kBig = std::numeric_limits<double>::max();
    Kokkos::parallel_for(
        "kortex::SurfaceNlm::exactFallback", Range(exec, 0, nFail), KOKKOS_LAMBDA(const std::int64_t f) {
          const std::int64_t j = failures(f);
          const float* a = &patches(j, 0);
          int cnt = 0;
          double thr = kBig;
          for (std::int32_t l = 0; l < static_cast<std::int32_t>(n); ++l) {
            if (l == j) continue;
            const double d = surfaceNlmDistanceExact(a, &patches(l, 0), pv);
            if (!(d < thr)) continue;
            int i = cnt < m ? cnt : m - 1;
            while (i > 0 && exactD_(j, i - 1) > d) {
              exactD(j, i) = exactD_(j, i - 1);
              listI(j, i) = listI(j, i - 1);
              --i;
            }
            exactD_(j, i) = d;
            listI(j, i) = l;
            if (cnt < m) ++cnt;
            if (cnt == m) thr = exactD_(j, m - 1);
          }
        });
  }
  exec.fence();
  if (progress) progress({"search", passes, passes});
  SearchSummary sum;
  sum.passes = passes;
  sum.evaluatedPairs = evaluatedPairs;
  sum.certificateFailures = nFail;
  sum.seedSeconds = seedSeconds;
  return sum;
}

}  // namespace

template <class ExecSpace>
void surfaceDenoise(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> phi,
                    ImageView<typename ExecSpace::memory_space> out, SurfaceNlmParams const& params,
                    SurfaceNlmInfo* info, SurfaceNlmProgress const& progress,
                    SurfaceNlmNeighbours<typename ExecSpace::memory_space>* neighboursOut) {
  using Mem = typename ExecSpace::memory_space;
  using Range = Range64<ExecSpace>;
  checkSameExtents(phi, out, "kortex::gpu::surfaceDenoise");
  if (!phi.span_is_contiguous() || !out.span_is_contiguous())
    throw InvalidArgument("kortex::gpu::surfaceDenoise: phi and out must be contiguous views");
  const int nz = static_cast<int>(phi.extent(0)), ny = static_cast<int>(phi.extent(1)),
            nx = static_cast<int>(phi.extent(2));
  if (nz < 2) throw InvalidArgument("kortex::gpu::surfaceDenoise: phi must be a 3D image");
  const std::int64_t total = static_cast<std::int64_t>(phi.size());
  const float* phiData = phi.data();
  const float band = params.band;

  // Band size; what sizes the buffers must hold (the job checked the parameters and phi).
  std::int64_t n = 0;
  Kokkos::parallel_reduce(
      "kortex::SurfaceNlm::bandSize", Range(exec, 0, total),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& c) { c += kx::fabs(phiData[i]) <= band ? 1 : 0; }, n);
  const int m = params.neighbors;
  if (n == 0 || n > std::numeric_limits<std::int32_t>::max() || m < 1 || m >= n)
    throw InvalidArgument("kortex::gpu::surfaceDenoise: a band of " + std::to_string(n) + " elements cannot hold " +
                          std::to_string(m) + " neighbours per element");
  const std::int64_t need = surfaceNlmBytes(n, params);
  const int kept = surfaceNlmKept(n, m);
  auto t0 = std::chrono::steady_clock::now();

  Kokkos::View<std::int64_t*, Mem> ids;
  Records<Mem> patches;
  bandRecords(exec, phi, params, n, ids, patches);

  SearchState<Mem> state;
  state.listD = ListF<Mem>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::listD"), n, kept);
  state.listI = ListI<Mem>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::listI"), n, kept);
  state.count = Kokkos::View<int*, Mem>("kortex::SurfaceNlm::count", n);
  state.kept = kept;
  state.seed = params.seedRadius;
  ListD<Mem> exactD;
  const SearchSummary search = searchNeighbours(exec, ConstRecords<Mem>(patches), params, n, state, exactD, progress, t0);
  const double searchSeconds = secondsSince(t0);
  const int passes = search.passes;
  const std::int64_t evaluatedPairs = search.evaluatedPairs;
  const std::int32_t nFail = search.certificateFailures;
  const double seedSeconds = search.seedSeconds;

  if (neighboursOut) {
    neighboursOut->index = decltype(neighboursOut->index)("kortex::SurfaceNlm::neighbours", n, m);
    neighboursOut->distance = decltype(neighboursOut->distance)("kortex::SurfaceNlm::neighbourDistances", n, m);
    auto idx = neighboursOut->index;
    auto dst = neighboursOut->distance;
    const ListI<Mem> listI = state.listI;
    Kokkos::parallel_for(
        "kortex::SurfaceNlm::copyNeighbours", Range(exec, 0, n * m), KOKKOS_LAMBDA(const std::int64_t t) {
          const std::int64_t j = t / m;
          const int k = static_cast<int>(t % m);
          idx(j, k) = listI(j, k);
          dst(j, k) = exactD(j, k);
        });
  }

  // Weights and dt (double).
  t0 = std::chrono::steady_clock::now();
  Kokkos::View<double**, Kokkos::LayoutLeft, Mem> w(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::weights"), n, m);
  double maxSum = 0.0;
  {
    const ListI<Mem> listI = state.listI;
    const double c1 = params.c1, c2 = params.c2;
    Kokkos::parallel_reduce(
        "kortex::SurfaceNlm::weights", Range(exec, 0, n),
        KOKKOS_LAMBDA(const std::int64_t j, double& mx) {
          const std::int64_t a = ids(j);
          const std::int64_t plane = static_cast<std::int64_t>(nx) * ny;
          const double ax = double(a % nx), ay = double((a / nx) % ny), az = double(a / plane);
          double s = 0.0;
          for (int k = 0; k < m; ++k) {
            const std::int64_t bId = ids(listI(j, k));
            const double dx = double(bId % nx) - ax, dy = double((bId / nx) % ny) - ay, dz = double(bId / plane) - az;
            const double wk = surfaceNlmWeight(dx * dx + dy * dy + dz * dz, exactD(j, k), c1, c2);
            w(j, k) = wk;
            s += wk;
          }
          if (s > mx) mx = s;
        },
        Kokkos::Max<double>(maxSum));
  }
  const double dt = maxSum > 0.0 ? 1.0 / maxSum : 0.0;
  exec.fence();
  const double weightSeconds = secondsSince(t0);
  if (progress) progress({"weights", 1, 1});

  // K Jacobi iterations on the band (double), then phi with the band replaced.
  t0 = std::chrono::steady_clock::now();
  Kokkos::View<double*, Mem> cur(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::phiBand"), n);
  Kokkos::View<double*, Mem> next(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kortex::SurfaceNlm::phiBandNext"), n);
  Kokkos::parallel_for(
      "kortex::SurfaceNlm::gather", Range(exec, 0, n), KOKKOS_LAMBDA(const std::int64_t j) { cur(j) = phiData[ids(j)]; });
  {
    const ListI<Mem> listI = state.listI;
    for (int it = 0; it < params.iterations; ++it) {
      const auto c = cur;
      const auto nx2 = next;
      Kokkos::parallel_for(
          "kortex::SurfaceNlm::iterate", Range(exec, 0, n), KOKKOS_LAMBDA(const std::int64_t j) {
            const double pj = c(j);
            double s = 0.0;
            for (int k = 0; k < m; ++k) s += w(j, k) * (c(listI(j, k)) - pj);
            nx2(j) = pj + dt * s;
          });
      std::swap(cur, next);
      if (progress && (it + 1) % 10 == 0) {
        exec.fence();
        progress({"iterate", it + 1, params.iterations});
      }
    }
  }
  Kokkos::deep_copy(exec, out, phi);
  float* outData = out.data();
  Kokkos::parallel_for(
      "kortex::SurfaceNlm::scatter", Range(exec, 0, n),
      KOKKOS_LAMBDA(const std::int64_t j) { outData[ids(j)] = static_cast<float>(cur(j)); });
  exec.fence();
  const double iterateSeconds = secondsSince(t0);
  if (progress) progress({"iterate", params.iterations, params.iterations});

  if (info) {
    info->bandSize = n;
    info->kept = kept;
    info->passes = passes;
    info->pairsEvaluated = evaluatedPairs;
    info->certificateFailures = nFail;
    info->dt = dt;
    info->maxWeightSum = maxSum;
    info->deviceBytes = need;
    info->searchSeconds = searchSeconds;
    info->seedSeconds = seedSeconds;
    info->weightSeconds = weightSeconds;
    info->iterateSeconds = iterateSeconds;
  }
}

#define KORTEX_INSTANTIATE_SURFACE_NLM(SPACE)                                                            \
  template void surfaceDenoise<SPACE>(SPACE const&, ConstImageView<SPACE::memory_space>,                 \
                                      ImageView<SPACE::memory_space>, SurfaceNlmParams const&,           \
                                      SurfaceNlmInfo*, SurfaceNlmProgress const&,                        \
                                      SurfaceNlmNeighbours<SPACE::memory_space>*);

#ifdef KOKKOS_ENABLE_SERIAL
KORTEX_INSTANTIATE_SURFACE_NLM(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
KORTEX_INSTANTIATE_SURFACE_NLM(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
KORTEX_INSTANTIATE_SURFACE_NLM(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
KORTEX_INSTANTIATE_SURFACE_NLM(Kokkos::Cuda)
#endif

#undef KORTEX_INSTANTIATE_SURFACE_NLM

}  // namespace kortex::gpu
