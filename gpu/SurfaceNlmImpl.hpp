// Kernels of the Kokkos surface NLM (entry point and design: gpu/SurfaceNlm.hpp; specification:
// core/SurfaceNlm.hpp). Internal header; no Eigen, no OpenMP pragmas, no VTK here.
//
// Views (N band elements, p = n^3 patch voxels, P = p rounded up to a multiple of 4, m' kept):
//   ids      (N)       linear voxel index of element j, increasing
//   patches  (N, P)    record j: P(ids[j])[k], zero padding after p (LayoutRight: one row per
//                      record, so a chunk of candidates is one contiguous block)
//   listD    (N, m')   float distances of the running top-m' (LayoutLeft: at a given k the
//   listI    (N, m')   threads of a warp touch consecutive words)
//   count    (N)       entries of the list filled so far
//   exactD   (N, m')   exact D after the re-rank (the first m are the neighbours)
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/SurfaceNlm.hpp"

namespace kortex::gpu::surface_impl {

template <class Mem>
using Records = Kokkos::View<float**, Kokkos::LayoutRight, Mem>;
template <class Mem>
using ConstRecords = Kokkos::View<const float**, Kokkos::LayoutRight, Mem>;
template <class Mem>
using ListF = Kokkos::View<float**, Kokkos::LayoutLeft, Mem>;
template <class Mem>
using ListD = Kokkos::View<double**, Kokkos::LayoutLeft, Mem>;
template <class Mem>
using ListI = Kokkos::View<std::int32_t**, Kokkos::LayoutLeft, Mem>;

constexpr float kInfF = 3.402823466e38f;  // FLT_MAX: above every finite Df

inline int paddedPatch(int patchVoxels) { return (patchVoxels + 3) / 4 * 4; }

// ---- candidate readers --------------------------------------------------------------------------

// Plain loads (Global): 16-byte loads of a record.
struct GlobalRead {
  const SurfaceNlmFloat4* p;
  KOKKOS_INLINE_FUNCTION SurfaceNlmFloat4 load(int g) const { return p[g]; }
};

// Read-only data path (RandomAccess): __ldg on CUDA devices. Kokkos 4.6 gives a const
// RandomAccess View the same loads as a plain one on CUDA, so the variant asks for the path
// itself; elsewhere a plain load.
struct ReadOnlyRead {
  const SurfaceNlmFloat4* p;
  KOKKOS_INLINE_FUNCTION SurfaceNlmFloat4 load(int g) const {
#if defined(__CUDA_ARCH__)
    const float4 v = __ldg(reinterpret_cast<const float4*>(p) + g);
    return SurfaceNlmFloat4{v.x, v.y, v.z, v.w};
#else
    return p[g];
#endif
  }
};

// Query patch of element j into registers (PV4 groups of 4 floats).
template <int PV4, class Mem>
KOKKOS_INLINE_FUNCTION void loadQuery(ConstRecords<Mem> const& patches, std::int64_t j, SurfaceNlmFloat4 (&q)[PV4]) {
  const SurfaceNlmFloat4* r = reinterpret_cast<const SurfaceNlmFloat4*>(&patches(j, 0));
  KORTEX_UNROLL
  for (int g = 0; g < PV4; ++g) q[g] = r[g];
}

// ---- the running top-m' of element j: a max-heap on (Df, index) ----------------------------------

// Order of the heap: a is worse than b (kept later in the spec's order).
KOKKOS_INLINE_FUNCTION bool worseCandidate(float da, std::int32_t ia, float db, std::int32_t ib) {
  return da > db || (da == db && ia > ib);
}

// Adds (d, l) to the heap of j holding cnt < kept entries (sift up).
template <class Mem>
KOKKOS_INLINE_FUNCTION void heapPush(ListF<Mem> const& listD, ListI<Mem> const& listI, std::int64_t j, int cnt, float d,
                                     std::int32_t l) {
  int i = cnt;
  while (i > 0) {
    const int p = (i - 1) / 2;
    const float dp = listD(j, p);
    const std::int32_t ip = listI(j, p);
    if (!worseCandidate(d, l, dp, ip)) break;
    listD(j, i) = dp;
    listI(j, i) = ip;
    i = p;
  }
  listD(j, i) = d;
  listI(j, i) = l;
}

// Replaces the worst entry (the root) of the full heap of j by (d, l) (sift down).
template <class Mem>
KOKKOS_INLINE_FUNCTION void heapReplaceRoot(ListF<Mem> const& listD, ListI<Mem> const& listI, std::int64_t j,
                                            int kept, float d, std::int32_t l) {
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= kept) break;
    float dc = listD(j, c);
    std::int32_t ic = listI(j, c);
    if (c + 1 < kept) {
      const float d2 = listD(j, c + 1);
      const std::int32_t i2 = listI(j, c + 1);
      if (worseCandidate(d2, i2, dc, ic)) {
        ++c;
        dc = d2;
        ic = i2;
      }
    }
    if (!worseCandidate(dc, ic, d, l)) break;
    listD(j, i) = dc;
    listI(j, i) = ic;
    i = c;
  }
  listD(j, i) = d;
  listI(j, i) = l;
}

template <class Mem>
struct SearchState {
  ListF<Mem> listD;  // max-heap per element (root = worst kept = the certificate's F)
  ListI<Mem> listI;
  Kokkos::View<int*, Mem> count;
  int kept = 0;
  int seed = 0;  // candidates j - seed .. j + seed were offered by the seed pass (seedScan)

  // The root (worst kept) of j's heap when it is full.
  KOKKOS_INLINE_FUNCTION void root(std::int64_t j, float& d, std::int32_t& i) const {
    d = listD(j, 0);
    i = listI(j, 0);
  }
  // (d, l) is kept while the heap is not full, else when it beats the root in (Df, index) order.
  KOKKOS_INLINE_FUNCTION static bool takes(int cnt, int kept, float thr, std::int32_t thrI, float d, std::int32_t l) {
    return cnt < kept || d < thr || (d == thr && l < thrI);
  }
  KOKKOS_INLINE_FUNCTION void offer(std::int64_t j, int& cnt, float& thr, std::int32_t& thrI, float d,
                                    std::int32_t l) const {
    if (cnt < kept) {
      heapPush<Mem>(listD, listI, j, cnt, d, l);
      ++cnt;
    } else {
      heapReplaceRoot<Mem>(listD, listI, j, kept, d, l);
    }
    if (cnt == kept) root(j, thr, thrI);
  }
  // Self and the seed window were offered already (or must never be).
  KOKKOS_INLINE_FUNCTION bool skip(std::int64_t j, std::int32_t l) const { return l >= j - seed && l <= j + seed; }

  // Candidates that passed the (possibly stale) threshold, waiting for the heap: up to 4, in
  // registers (every index is a constant). Used by the Global and RandomAccess scans (one scan =
  // a whole pass): the lanes of a warp then update their heaps 4 candidates at a time and side by
  // side at the end, instead of one lane at a time inside the distance loop. H200, N = 175k:
  // Global 1515 -> 904 ms, RandomAccess 1676 -> 904 ms; ScratchBroadcast (one scan = 64
  // candidates) went 624 -> 658 ms with it, so it offers at once (Buffered = false).
  struct Pending {
    float d[4];
    std::int32_t l[4];
    int n = 0;
  };
  KOKKOS_INLINE_FUNCTION void flush(std::int64_t j, Pending& p, int& cnt, float& thr, std::int32_t& thrI) const {
    KORTEX_UNROLL
    for (int s = 0; s < 4; ++s)
      if (s < p.n && takes(cnt, kept, thr, thrI, p.d[s], p.l[s])) offer(j, cnt, thr, thrI, p.d[s], p.l[s]);
    p.n = 0;
  }
  KOKKOS_INLINE_FUNCTION void hold(std::int64_t j, Pending& p, int& cnt, float& thr, std::int32_t& thrI, float d,
                                   std::int32_t l) const {
    if (p.n == 4) flush(j, p, cnt, thr, thrI);
    // Shift in at slot 0 (constant indices keep the buffer in registers).
    p.d[3] = p.d[2];
    p.l[3] = p.l[2];
    p.d[2] = p.d[1];
    p.l[2] = p.l[1];
    p.d[1] = p.d[0];
    p.l[1] = p.l[0];
    p.d[0] = d;
    p.l[0] = l;
    ++p.n;
  }

  template <bool Buffered>
  KOKKOS_INLINE_FUNCTION void consider(std::int64_t j, Pending& p, int& cnt, float& thr, std::int32_t& thrI, float d,
                                       std::int32_t l) const {
    if (!takes(cnt, kept, thr, thrI, d, l) || skip(j, l)) return;
    if (Buffered)
      hold(j, p, cnt, thr, thrI, d, l);
    else
      offer(j, cnt, thr, thrI, d, l);
  }

  // Scans candidates [b, e) of element j held in q; `at(l)` gives the reader of candidate l's patch.
  template <int PV4, bool Buffered, class At>
  KOKKOS_INLINE_FUNCTION void scan(std::int64_t j, const SurfaceNlmFloat4 (&q)[PV4], std::int32_t b, std::int32_t e,
                                   At const& at) const {
    int cnt = count(j);
    float thr = 0.0f;
    std::int32_t thrI = 0;
    if (cnt == kept) root(j, thr, thrI);
    Pending p;
    std::int32_t l = b;
    // Two candidates per step: independent sums for the pipeline.
    for (; l + 1 < e; l += 2) {
      const float d0 = surfaceNlmDistanceFloat<PV4>(q, at(l));
      const float d1 = surfaceNlmDistanceFloat<PV4>(q, at(l + 1));
      consider<Buffered>(j, p, cnt, thr, thrI, d0, l);
      consider<Buffered>(j, p, cnt, thr, thrI, d1, l + 1);
    }
    if (l < e) consider<Buffered>(j, p, cnt, thr, thrI, surfaceNlmDistanceFloat<PV4>(q, at(l)), l);
    if (Buffered) flush(j, p, cnt, thr, thrI);
    count(j) = cnt;
  }
};

// ---- seed pass ------------------------------------------------------------------------------------
// Offers each element the candidates j - seed .. j + seed (band neighbours in raster order: mostly
// spatial neighbours, whose patches are similar), so the heap's threshold is tight before the
// passes start and few of the N candidates after it get into the heap; the passes skip the window.

template <int PV4, class Exec>
struct SearchSeed {
  using Mem = typename Exec::memory_space;
  ConstRecords<Mem> patches;
  SearchState<Mem> state;
  std::int64_t n = 0;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t j) const {
    SurfaceNlmFloat4 q[PV4];
    loadQuery<PV4, Mem>(patches, j, q);
    const SurfaceNlmFloat4* base = reinterpret_cast<const SurfaceNlmFloat4*>(patches.data());
    int cnt = 0;
    float thr = 0.0f;
    std::int32_t thrI = 0;
    const std::int64_t lo = j - state.seed > 0 ? j - state.seed : 0;
    const std::int64_t hi = j + state.seed < n - 1 ? j + state.seed : n - 1;
    for (std::int64_t l = lo; l <= hi; ++l) {
      if (l == j) continue;
      const float d = surfaceNlmDistanceFloat<PV4>(q, GlobalRead{base + l * PV4});
      if (SearchState<Mem>::takes(cnt, state.kept, thr, thrI, d, static_cast<std::int32_t>(l)))
        state.offer(j, cnt, thr, thrI, d, static_cast<std::int32_t>(l));
    }
    state.count(j) = cnt;
  }
};

// ---- search pass: Global / RandomAccess ----------------------------------------------------------

template <int PV4, class Reader, class Exec>
struct SearchDirect {
  using Mem = typename Exec::memory_space;
  ConstRecords<Mem> patches;
  SearchState<Mem> state;
  std::int32_t b = 0, e = 0;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t j) const {
    SurfaceNlmFloat4 q[PV4];
    loadQuery<PV4, Mem>(patches, j, q);
    const SurfaceNlmFloat4* base = reinterpret_cast<const SurfaceNlmFloat4*>(patches.data());
    state.template scan<PV4, true>(j, q, b, e, [&](std::int32_t l) { return Reader{base + std::int64_t(l) * PV4}; });
  }
};

// ---- search pass: ScratchBroadcast ---------------------------------------------------------------

template <int PV4, class Exec>
struct SearchScratch {
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  ConstRecords<Mem> patches;
  SearchState<Mem> state;
  std::int32_t b = 0, e = 0;
  std::int64_t n = 0;
  int queriesPerTeam = 0;  // elements (queries) of one team
  int chunk = 0;           // candidates per scratch sub-chunk

  static std::size_t scratchBytes(int chunkCandidates, int paddedVoxels) {
    return static_cast<std::size_t>(chunkCandidates) * static_cast<std::size_t>(paddedVoxels) * sizeof(float) + 16;
  }

  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    const int P = PV4 * 4;
    float* cand = static_cast<float*>(team.team_scratch(0).get_shmem_aligned(
        static_cast<std::size_t>(chunk) * static_cast<std::size_t>(P) * sizeof(float), 16));
    const std::int64_t q0 = static_cast<std::int64_t>(team.league_rank()) * queriesPerTeam;
    for (std::int32_t c0 = b; c0 < e; c0 += chunk) {
      const std::int32_t c1 = c0 + chunk < e ? c0 + chunk : e;
      const int groups = (c1 - c0) * PV4;
      const SurfaceNlmFloat4* src = reinterpret_cast<const SurfaceNlmFloat4*>(patches.data()) + std::int64_t(c0) * PV4;
      SurfaceNlmFloat4* dst = reinterpret_cast<SurfaceNlmFloat4*>(cand);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, groups), [&](const int i) { dst[i] = src[i]; });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, queriesPerTeam), [&](const int t) {
        const std::int64_t j = q0 + t;
        if (j >= n) return;
        SurfaceNlmFloat4 q[PV4];
        loadQuery<PV4, Mem>(patches, j, q);
        const SurfaceNlmFloat4* c4 = reinterpret_cast<const SurfaceNlmFloat4*>(cand);
        state.template scan<PV4, false>(j, q, c0, c1, [&](std::int32_t l) { return GlobalRead{c4 + (l - c0) * PV4}; });
      });
      team.team_barrier();
    }
  }
};

}  // namespace kortex::gpu::surface_impl
