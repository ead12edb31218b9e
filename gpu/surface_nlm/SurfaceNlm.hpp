// Kokkos level-set non-local-means surface denoising (specification: core/SurfaceNlm.hpp).
//
// Design (Lee et al., surface part): every narrow-band element is a self-contained record (its
// n^3 patch, padded to a multiple of 4 floats for 16-byte rows, and its running top-m' list);
// the all-pairs search is multi-pass: pass p compares every element against one chunk of
// candidates, and each element keeps its best m' = m + extra candidates by the float distance Df
// (m' entries of state, not N), in a max-heap on (Df, index) rather than the paper's sorted list
// (an insertion shifts up to m' entries, one dependent load at a time; docs/surface.md has the
// measurements). The threshold (the heap's root) stays in a register.
// A seed pass first offers each element its band neighbours j - seed .. j + seed (mostly spatial
// neighbours, with similar patches), so the threshold is tight before the passes; the heap is
// ordered by (Df, index), so the kept set does not depend on the order candidates arrive in.
// Where the chunk is read from (SurfaceNlmParams::variant):
//   Global           - RangePolicy, one element per thread, candidate patches loaded from global
//                      memory (every thread of a warp reads the same address: one transaction);
//   RandomAccess     - the same through a View with the RandomAccess trait (read-only data path;
//                      Kokkos 4.6 on CUDA maps it to the same loads as Global, see docs/surface.md);
//   ScratchBroadcast - TeamPolicy; the team loads sub-chunks of candidate patches cooperatively
//                      into level-0 scratch, team_barrier(), and every thread reads the same scratch
//                      word at once (a broadcast, the constant-memory analogue of the paper).
//   Pruned           - (default; not the paper's brute force) ScratchBroadcast's kernel over the
//                      band sorted by patch sum S: D >= (S_j - S_l)^2 / p (core/SurfaceNlm.hpp), so
//                      once an element's list is full only candidates with S near its own can enter;
//                      a team of elements with nearly equal S scans outward in that order and stops
//                      when no candidate left can beat any of its thresholds. Same neighbour sets
//                      (the certificate below covers the skipped candidates), fewer distances
//                      (SurfaceNlmInfo::pairsEvaluated).
// Exactness: the m' kept candidates are re-ranked by the exact D of the spec (double), and the
// result is certified with the float error bound of core/SurfaceNlm.hpp; elements whose
// certificate fails are searched again exactly (double, all pairs). The neighbour sets therefore
// equal the CPU reference's, ties aside. Weights, dt and the K Jacobi iterations are in double.
//
// Device memory: surfaceNlmBytes() (records, lists, weights); pipeline/Surface.hpp refuses a band
// whose search does not fit in what the device reports free, naming the size it needs.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "core/Image.hpp"
#include "core/SurfaceNlm.hpp"

namespace kortex::gpu {

// Extra candidates kept by the float pre-selection beyond m (see core/SurfaceNlm.hpp).
// 32: the certificate then failed for no element of the noisy spheres (17.7k-175k) nor of the
// ICBM152 (1.13M) and IXI (149k-184k) white-matter bands (SurfaceNlmInfo::certificateFailures,
// bench/results/surface_*nvidia-h200*); exact ties still fail it (tests: exact_fallback_on_ties).
inline constexpr int kSurfaceNlmExtraCandidates = 32;

// Candidates kept per element by the pre-selection for a band of n elements.
inline int surfaceNlmKept(std::int64_t n, int m) {
  const std::int64_t k = std::int64_t(m) + kSurfaceNlmExtraCandidates;
  return static_cast<int>(k < n - 1 ? k : n - 1);
}

// Bytes the Kokkos run allocates on the device for a band of n elements (the image itself aside).
std::int64_t surfaceNlmBytes(std::int64_t n, SurfaceNlmParams const& params);

struct SurfaceNlmInfo {
  std::int64_t bandSize = 0;
  int kept = 0;                          // m' of the pre-selection
  int passes = 0;                        // kernel launches of the search after the seed pass
  std::int64_t pairsEvaluated = 0;       // float distances computed by the pre-selection (N^2 + seed
                                         // for the brute-force variants)
  std::int64_t certificateFailures = 0;  // elements searched again exactly
  double dt = 0.0;
  double maxWeightSum = 0.0;
  std::int64_t deviceBytes = 0;          // surfaceNlmBytes()
  double searchSeconds = 0.0;            // pre-selection + re-rank + exact fallback (fenced)
  double seedSeconds = 0.0;              // of which the records and the seed pass
  double weightSeconds = 0.0;            // weights and dt
  double iterateSeconds = 0.0;           // K iterations
};

// Neighbour sets of a run (for tests and validation): N x m, row j in the spec's order.
template <class MemorySpace>
struct SurfaceNlmNeighbours {
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, MemorySpace> index;
  Kokkos::View<double**, Kokkos::LayoutRight, MemorySpace> distance;
};

// The whole method on phi (3D; `out` gets phi with the band replaced by the denoised values).
// Preconditions (pipeline/Surface.hpp checks them, with the memory the search needs): valid
// parameters, finite phi, 0 < m < band size < 2^31. Throws InvalidArgument for mismatched or
// non-contiguous views and a band that cannot hold m neighbours. Fences `exec` before returning.
template <class ExecSpace>
void surfaceDenoise(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> phi,
                    ImageView<typename ExecSpace::memory_space> out, SurfaceNlmParams const& params,
                    SurfaceNlmInfo* info = nullptr, SurfaceNlmProgress const& progress = {},
                    SurfaceNlmNeighbours<typename ExecSpace::memory_space>* neighbours = nullptr);

}  // namespace kortex::gpu
