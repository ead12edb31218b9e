// Kernels of the Kokkos surface NLM (entry point and design: gpu/surface_nlm/SurfaceNlm.hpp; specification:
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
// Pruned and PrunedBlocks:
//   sums     (N)       S_j = sum_k P(ids[j])[k] in double (core/SurfaceNlm.hpp, "Pruning")
//   blocks   (N, B)    PrunedBlocks: the block sums T_jb as float (core/SurfaceNlm.hpp)
//   order    (N)       sumKey(S_j) << 32 | j, sorted: position -> element, S non-decreasing up to
//                      the float rounding the key keeps (sumKeyLower/Upper bound S at a position)
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/SurfaceNlm.hpp"

namespace kortex::gpu::surface_nlm_detail {

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
  // candidates) went 624 -> 658 ms with it, so it offers at once (Buffered = false). Pruned
  // buffers (see SearchPruned).
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

// On a GPU the seed runs like ScratchBroadcast: a team of 128 consecutive elements j0..j0+127
// loads the rows [j0 - seed, j0 + 127 + seed] into scratch 64 at a time, and each thread (one
// element, its query in registers) takes the rows of its own window from the broadcast. H200,
// N = 175k: the direct seed above took about 30 ms, as each lane read a different row.
template <int PV4, class Exec>
struct SearchSeedScratch {
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  ConstRecords<Mem> patches;
  SearchState<Mem> state;
  std::int64_t n = 0;
  int chunk = 0;  // rows per scratch sub-chunk; the team size is the elements per team

  static std::size_t scratchBytes(int chunkCandidates, int paddedVoxels) {
    return static_cast<std::size_t>(chunkCandidates) * static_cast<std::size_t>(paddedVoxels) * sizeof(float) + 16;
  }

  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    const int P = PV4 * 4;
    SurfaceNlmFloat4* cand = static_cast<SurfaceNlmFloat4*>(team.team_scratch(0).get_shmem_aligned(
        static_cast<std::size_t>(chunk) * static_cast<std::size_t>(P) * sizeof(float), 16));
    const std::int64_t j0 = static_cast<std::int64_t>(team.league_rank()) * team.team_size();
    const std::int64_t j = j0 + team.team_rank();
    const bool active = j < n;
    const std::int64_t lo = j0 - state.seed > 0 ? j0 - state.seed : 0;
    const std::int64_t hiTeam = j0 + team.team_size() - 1 + state.seed;
    const std::int64_t hi = hiTeam < n - 1 ? hiTeam : n - 1;  // rows [lo, hi]
    SurfaceNlmFloat4 q[PV4];
    if (active) loadQuery<PV4, Mem>(patches, j, q);
    int cnt = 0;
    float thr = 0.0f;
    std::int32_t thrI = 0;
    const SurfaceNlmFloat4* rec = reinterpret_cast<const SurfaceNlmFloat4*>(patches.data());
    for (std::int64_t c0 = lo; c0 <= hi; c0 += chunk) {
      const int nc = static_cast<int>(c0 + chunk <= hi + 1 ? chunk : hi + 1 - c0);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc * PV4), [&](const int i) { cand[i] = rec[c0 * PV4 + i]; });
      team.team_barrier();
      if (active) {
        for (int c = 0; c < nc; ++c) {
          const std::int64_t l = c0 + c;
          if (l == j || l < j - state.seed || l > j + state.seed) continue;
          const float d = surfaceNlmDistanceFloat<PV4>(q, GlobalRead{cand + c * PV4});
          if (SearchState<Mem>::takes(cnt, state.kept, thr, thrI, d, static_cast<std::int32_t>(l)))
            state.offer(j, cnt, thr, thrI, d, static_cast<std::int32_t>(l));
        }
      }
      team.team_barrier();
    }
    if (active) state.count(j) = cnt;
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

// ---- search: Pruned -------------------------------------------------------------------------------
// Key of a patch sum: the largest float <= S as an order-preserving 32-bit code (so sorting the
// 64-bit (code << 32 | j) sorts the elements by S up to that rounding) and the bounds it implies.
KOKKOS_INLINE_FUNCTION std::uint32_t floatOrderCode(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
KOKKOS_INLINE_FUNCTION float floatFromOrderCode(std::uint32_t c) {
  const std::uint32_t b = (c & 0x80000000u) ? (c & 0x7fffffffu) : ~c;
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
KOKKOS_INLINE_FUNCTION std::uint64_t sumKey(double S, std::int32_t j) {
  const float f = static_cast<float>(S);  // nearest; step down when it rounded up
  std::uint32_t c = floatOrderCode(f);
  if (static_cast<double>(f) > S) --c;
  return (static_cast<std::uint64_t>(c) << 32) | static_cast<std::uint32_t>(j);
}
KOKKOS_INLINE_FUNCTION std::int32_t keyElement(std::uint64_t key) {
  return static_cast<std::int32_t>(key & 0xffffffffu);
}
KOKKOS_INLINE_FUNCTION double sumKeyLower(std::uint64_t key) {  // <= S
  return static_cast<double>(floatFromOrderCode(static_cast<std::uint32_t>(key >> 32)));
}
KOKKOS_INLINE_FUNCTION double sumKeyUpper(std::uint64_t key) {  // >= S (the next float up)
  return static_cast<double>(floatFromOrderCode(static_cast<std::uint32_t>(key >> 32) + 1u));
}

// A team takes queriesPerTeam consecutive positions of the sorted order (elements with nearly
// equal S), then scans candidate sub-chunks of the same order outward from its own block, nearest
// side in S first, loading each into scratch as ScratchBroadcast does. After every sub-chunk it
// recomputes its window [min_j (S_j - R_j), max_j (S_j + R_j)] (R of core/SurfaceNlm.hpp from each
// query's current threshold) and stops on a side once the next candidate's S lies outside it;
// inside a sub-chunk a query skips every candidate outside its own radius.
// On a GPU the team has one thread per query, which keeps its query patch, list state and radius
// in registers for the whole scan; host teams (one thread) loop over their queries per sub-chunk
// and keep the state in the lists. Offers are buffered (Pending) and flushed at the end of each
// sub-chunk: the candidates that reach this scan are the similar ones, so offers are dense and the
// heap's dependent global loads dominated (Nsight Compute: the sift-down compares held ~40% of the
// stall samples). H200, N = 175k, seed 512, this kernel: state reloaded per sub-chunk 252 ms, kept
// in registers 210 ms, plus buffered offers 187 ms.
// Blocks (PrunedBlocks): a candidate inside the query's sum radius is compared only when the block-sum
// bound (core/SurfaceNlm.hpp) does not exceed the query's threshold either; the chunk then also holds
// the candidates' B block sums, the query's are in registers.
template <int PV4, class Exec, bool Blocks = false>
struct SearchPruned {
  using BlockLayout = SurfaceNlmBlocks<PV4>;
  static constexpr int kB = Blocks ? BlockLayout::kCount : 0;
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  static constexpr bool kThreadPerQuery = !Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible;
  ConstRecords<Mem> patches;
  SearchState<Mem> state;
  Kokkos::View<const std::uint64_t*, Mem> order;
  Kokkos::View<const double*, Mem> sums;
  Kokkos::View<const float**, Kokkos::LayoutRight, Mem> blocks;  // (N, B) when Blocks
  Kokkos::View<std::int64_t*, Mem> evaluated;  // per element: candidate distances computed
  std::int64_t n = 0;
  int queriesPerTeam = 0;  // = team size when kThreadPerQuery
  int chunk = 0;
  std::int64_t firstTeam = 0;  // league rank 0 is team firstTeam of the whole search
  int patchVoxels = 0;
  double sumError = 0.0;
  float blockMargin = 0.0f;  // Blocks: surfaceNlmBlockMargin
  float invN[BlockLayout::kCount] = {};  // Blocks: 1 / n_b

  static std::size_t scratchBytes(int chunkCandidates, int paddedVoxels) {
    return static_cast<std::size_t>(chunkCandidates) *
               (static_cast<std::size_t>(paddedVoxels) * sizeof(float) + sizeof(double) + sizeof(std::int32_t) +
                static_cast<std::size_t>(kB) * sizeof(float)) +
           4 * 16;
  }

  struct Chunk {
    const SurfaceNlmFloat4* patch;
    const double* S;
    const std::int32_t* index;
    const float* T;  // Blocks: B block sums per candidate
    int size;
  };

  // The query's block sums (Blocks).
  struct QueryBlocks {
    float t[BlockLayout::kCount];
  };
  KOKKOS_INLINE_FUNCTION QueryBlocks queryBlocks(std::int64_t j) const {
    QueryBlocks q{};
    if constexpr (Blocks) {
      KORTEX_UNROLL
      for (int b = 0; b < kB; ++b) q.t[b] = blocks(j, b);
    }
    return q;
  }

  // Loads candidates at sorted positions [c0, c1) into scratch (cooperative, then a barrier).
  KOKKOS_INLINE_FUNCTION Chunk load(Member const& team, float* cand, double* candS, std::int32_t* candI, float* candT,
                                    std::int64_t c0, std::int64_t c1) const {
    const int nc = static_cast<int>(c1 - c0);
    const SurfaceNlmFloat4* rec = reinterpret_cast<const SurfaceNlmFloat4*>(patches.data());
    SurfaceNlmFloat4* dst = reinterpret_cast<SurfaceNlmFloat4*>(cand);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc * PV4), [&](const int i) {
      const std::int64_t l = keyElement(order(c0 + i / PV4));
      dst[i] = rec[l * PV4 + i % PV4];
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc), [&](const int c) {
      const std::int32_t l = keyElement(order(c0 + c));
      candI[c] = l;
      candS[c] = sums(l);
    });
    if constexpr (Blocks) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc * kB), [&](const int i) {
        candT[i] = blocks(keyElement(order(c0 + i / kB)), i % kB);
      });
    }
    team.team_barrier();
    return Chunk{dst, candS, candI, candT, nc};
  }

  // Query j (patch q, sum Sj) against a loaded chunk; returns the distances computed.
  KOKKOS_INLINE_FUNCTION std::int64_t scan(std::int64_t j, double Sj, const SurfaceNlmFloat4 (&q)[PV4],
                                           QueryBlocks const& qb, Chunk const& ch, int& cnt, float& thr,
                                           std::int32_t& thrI, double& R) const {
    std::int64_t done = 0;
    typename SearchState<Mem>::Pending pend;
    auto consider = [&](float d, std::int32_t l) {
      const int before = cnt;
      const float thrBefore = thr;
      state.template consider<true>(j, pend, cnt, thr, thrI, d, l);
      if (cnt == state.kept && (cnt != before || thr != thrBefore)) R = surfaceNlmSumRadius(thr, patchVoxels, sumError);
    };
    // Inside the sum radius and, for Blocks while the list is full, not beyond the block bound.
    auto inside = [&](int c) {
      if (!(kx::fabs(ch.S[c] - Sj) <= R)) return false;
      if constexpr (Blocks) {
        if (cnt == state.kept &&
            surfaceNlmBlockBound<BlockLayout::kCount>(qb.t, ch.T + c * kB, invN, blockMargin) > thr * kSurfaceNlmBlockSlack)
          return false;
      }
      return true;
    };
    int c = 0;
    // Two candidates per step (independent sums), computed when either is inside.
    for (; c + 1 < ch.size; c += 2) {
      const bool in0 = inside(c), in1 = inside(c + 1);
      if (!(in0 || in1)) continue;
      const float d0 = surfaceNlmDistanceFloat<PV4>(q, GlobalRead{ch.patch + c * PV4});
      const float d1 = surfaceNlmDistanceFloat<PV4>(q, GlobalRead{ch.patch + (c + 1) * PV4});
      done += 2;
      if (in0) consider(d0, ch.index[c]);
      if (in1) consider(d1, ch.index[c + 1]);
    }
    if (c < ch.size && inside(c)) {
      consider(surfaceNlmDistanceFloat<PV4>(q, GlobalRead{ch.patch + c * PV4}), ch.index[c]);
      done += 1;
    }
    state.flush(j, pend, cnt, thr, thrI);
    if (cnt == state.kept) R = surfaceNlmSumRadius(thr, patchVoxels, sumError);
    return done;
  }

  KOKKOS_INLINE_FUNCTION double radiusOf(int cnt, float thr) const {
    return cnt == state.kept ? surfaceNlmSumRadius(thr, patchVoxels, sumError) : 1e300;  // not full: no skip
  }
  // R of element j from the state kept in its list (host path).
  KOKKOS_INLINE_FUNCTION double storedRadius(std::int64_t j) const {
    const int cnt = state.count(j);
    return cnt == state.kept ? surfaceNlmSumRadius(state.listD(j, 0), patchVoxels, sumError) : 1e300;
  }

  // The scan order: own block, then sub-chunks outward while the window [lo, hi] reaches them.
  // `visit(c0, c1)` processes a sub-chunk; `window(lo, hi)` gives the team's current window.
  template <class Visit, class Window>
  KOKKOS_INLINE_FUNCTION void walk(std::int64_t p0, std::int64_t p1, Visit const& visit, Window const& window) const {
    for (std::int64_t c0 = p0; c0 < p1; c0 += chunk) visit(c0, c0 + chunk < p1 ? c0 + chunk : p1);
    const double centre = 0.5 * (sumKeyLower(order(p0)) + sumKeyUpper(order(p1 - 1)));
    std::int64_t up = p1, down = p0;
    for (;;) {
      double lo, hi;
      window(lo, hi);
      // Every candidate at a position >= up has S >= sumKeyLower(order(up)); below down, S <= the upper bound.
      const bool goUp = up < n && sumKeyLower(order(up)) <= hi;
      const bool goDown = down > 0 && sumKeyUpper(order(down - 1)) >= lo;
      if (!goUp && !goDown) break;
      if (goUp && (!goDown || sumKeyLower(order(up)) - centre <= centre - sumKeyUpper(order(down - 1)))) {
        const std::int64_t e = up + chunk < n ? up + chunk : n;
        visit(up, e);
        up = e;
      } else {
        const std::int64_t b = down - chunk > 0 ? down - chunk : 0;
        visit(b, down);
        down = b;
      }
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    const int P = PV4 * 4;
    float* cand = static_cast<float*>(team.team_scratch(0).get_shmem_aligned(
        static_cast<std::size_t>(chunk) * static_cast<std::size_t>(P) * sizeof(float), 16));
    double* candS = static_cast<double*>(team.team_scratch(0).get_shmem_aligned(chunk * sizeof(double), 16));
    std::int32_t* candI =
        static_cast<std::int32_t*>(team.team_scratch(0).get_shmem_aligned(chunk * sizeof(std::int32_t), 16));
    float* candT = Blocks ? static_cast<float*>(team.team_scratch(0).get_shmem_aligned(
                                static_cast<std::size_t>(chunk) * kB * sizeof(float), 16))
                          : nullptr;
    const std::int64_t p0 = (firstTeam + team.league_rank()) * queriesPerTeam;
    if (p0 >= n) return;
    const std::int64_t p1 = p0 + queriesPerTeam < n ? p0 + queriesPerTeam : n;
    const int nq = static_cast<int>(p1 - p0);

    if constexpr (kThreadPerQuery) {
      // One query per thread (team size = queriesPerTeam), state in registers.
      const int t = team.team_rank();
      const bool active = t < nq;
      const std::int64_t j = active ? keyElement(order(p0 + t)) : 0;
      const double Sj = active ? sums(j) : 0.0;
      SurfaceNlmFloat4 q[PV4];
      if (active) loadQuery<PV4, Mem>(patches, j, q);
      const QueryBlocks qb = active ? queryBlocks(j) : QueryBlocks{};
      int cnt = active ? state.count(j) : 0;
      float thr = 0.0f;
      std::int32_t thrI = 0;
      if (active && cnt == state.kept) state.root(j, thr, thrI);
      double R = radiusOf(cnt, thr);
      std::int64_t done = 0;
      walk(
          p0, p1,
          [&](std::int64_t c0, std::int64_t c1) {
            const Chunk ch = load(team, cand, candS, candI, candT, c0, c1);
            if (active) done += scan(j, Sj, q, qb, ch, cnt, thr, thrI, R);
            team.team_barrier();
          },
          [&](double& lo, double& hi) {
            double h = active ? Sj + R : -1e300, l = active ? R - Sj : -1e300;
            team.team_reduce(Kokkos::Max<double>(h));
            team.team_reduce(Kokkos::Max<double>(l));
            lo = -l;
            hi = h;
          });
      if (active) {
        state.count(j) = cnt;
        evaluated(j) = done;
      }
    } else {
      // Host: one thread loops over the team's queries per sub-chunk; the state stays in the lists.
      walk(
          p0, p1,
          [&](std::int64_t c0, std::int64_t c1) {
            const Chunk ch = load(team, cand, candS, candI, candT, c0, c1);
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nq), [&](const int t) {
              const std::int64_t j = keyElement(order(p0 + t));
              SurfaceNlmFloat4 q[PV4];
              loadQuery<PV4, Mem>(patches, j, q);
              int cnt = state.count(j);
              float thr = 0.0f;
              std::int32_t thrI = 0;
              if (cnt == state.kept) state.root(j, thr, thrI);
              double R = radiusOf(cnt, thr);
              evaluated(j) += scan(j, sums(j), q, queryBlocks(j), ch, cnt, thr, thrI, R);
              state.count(j) = cnt;
            });
            team.team_barrier();
          },
          [&](double& lo, double& hi) {
            double h = -1e300, l = -1e300;
            Kokkos::parallel_reduce(
                Kokkos::TeamThreadRange(team, nq),
                [&](const int t, double& mx) {
                  const std::int64_t j = keyElement(order(p0 + t));
                  const double v = sums(j) + storedRadius(j);
                  if (v > mx) mx = v;
                },
                Kokkos::Max<double>(h));
            Kokkos::parallel_reduce(
                Kokkos::TeamThreadRange(team, nq),
                [&](const int t, double& mx) {
                  const std::int64_t j = keyElement(order(p0 + t));
                  const double v = storedRadius(j) - sums(j);
                  if (v > mx) mx = v;
                },
                Kokkos::Max<double>(l));
            lo = -l;
            hi = h;
          });
    }
  }
};

// ---- exact re-rank and certificate ------------------------------------------------------------------
// One team per element: its threads compute the exact D of the m' kept candidates side by side
// (one candidate each), then each candidate's rank in (D, index) order by counting, and write the
// list in that order. The candidate of rank m - 1 checks the certificate of core/SurfaceNlm.hpp
// against the heap root (the worst Df kept). (docs/surface.md: why one team per element.)
template <class Exec>
struct Rerank {
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  ConstRecords<Mem> patches;
  ListF<Mem> listD;
  ListI<Mem> listI;
  ListD<Mem> exactD;
  Kokkos::View<std::int32_t*, Mem> failures;
  Kokkos::View<std::int32_t, Mem> failCount;
  int kept = 0, m = 0, patchVoxels = 0;
  bool allKept = false;  // m' = N - 1: every candidate kept, nothing to certify

  static std::size_t scratchBytes(int kept, int patchVoxels) {
    return static_cast<std::size_t>(kept) * (sizeof(double) + sizeof(std::int32_t)) +
           static_cast<std::size_t>(patchVoxels) * sizeof(float) + 3 * 16;
  }

  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    const std::int64_t j = team.league_rank();
    float* a = static_cast<float*>(team.team_scratch(0).get_shmem_aligned(patchVoxels * sizeof(float), 16));
    double* d = static_cast<double*>(team.team_scratch(0).get_shmem_aligned(kept * sizeof(double), 16));
    std::int32_t* id = static_cast<std::int32_t*>(team.team_scratch(0).get_shmem_aligned(kept * sizeof(std::int32_t), 16));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, patchVoxels), [&](const int k) { a[k] = patches(j, k); });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kept), [&](const int k) {
      const std::int32_t l = listI(j, k);
      id[k] = l;
      d[k] = surfaceNlmDistanceExact(a, &patches(l, 0), patchVoxels);
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kept), [&](const int k) {
      int rank = 0;
      for (int k2 = 0; k2 < kept; ++k2) rank += surfaceNlmBefore(d[k2], id[k2], d[k], id[k]) ? 1 : 0;
      exactD(j, rank) = d[k];
      listI(j, rank) = id[k];
      if (rank == m - 1 && !allKept) {
        const double bound = surfaceNlmExactLowerBound(listD(j, 0), patchVoxels);  // heap root: the worst Df kept
        if (!(d[k] <= bound)) failures(Kokkos::atomic_fetch_add(&failCount(), 1)) = static_cast<std::int32_t>(j);
      }
    });
  }
};

}  // namespace kortex::gpu::surface_nlm_detail
