// Level-set non-local-means surface denoising with exact all-pairs patch search: the
// specification every back end implements, the parameters, and the per-element maths shared by
// every Kokkos variant. Method: Dong et al., "Level set based nonlocal surface restoration",
// extended to the whole narrow band; GPU design of Lee et al. (surface part). The CPU reference
// (reference_cpu/SurfaceNlm.cpp) implements this text independently; it shares only the
// parameter struct and the conventions below.
//
// ---- Signed distance --------------------------------------------------------------------------
// Index space (voxels; spacing does not enter, as in every Kortex filter). From a binary mask M
// (inside = voxels with value 1):
//   phi(x) = -(d(x, outside) - 1/2)   for x inside,
//   phi(x) =   d(x, inside)  - 1/2    for x outside,
// d(x, S) the exact Euclidean distance from voxel centre x to the nearest voxel centre of S
// (separable exact squared distance transform, lower envelope of parabolas, Felzenszwalb and
// Huttenlocher 2012). The zero level set lies half way between an inside and an outside voxel
// centre; phi < 0 inside. A mask with no inside or no outside voxel has no surface: refused.
//
// ---- Narrow band and records ------------------------------------------------------------------
// Band: B = { x : |phi(x)| <= band }, listed in increasing linear index (x fastest, then y, z);
// element j of the band is the voxel ids[j]. N = |B|.
// Patch of x: the n^3 values phi(c(x + o)), o in {-h..h}^3, h = (n - 1) / 2, c = clamp to the
// grid (core/Boundary.hpp), in the order z, y, x of o (x fastest): P(x)[k], k = 0..n^3-1.
//
// ---- Neighbours (exact) -----------------------------------------------------------------------
// D(j, l) = sum_k (P(ids[j])[k] - P(ids[l])[k])^2, each difference and square in double from the
// float phi values, summed in k order in double. Candidates of j: every l != j in B (all pairs;
// j itself is excluded: its term in the update below is zero, but it would enter dt).
// Order: l before l' iff D(j, l) < D(j, l') or (D(j, l) == D(j, l') and l < l') (ties broken by
// the smaller band index). N(j) = the first m candidates in that order (m < N required).
// A back end may compute D another way (float, ||a||^2 + ||b||^2 - 2ab) only to pre-select; its
// neighbour sets must equal these except where two candidates' exact D differ by no more than
// kTieRelative * D (a "tie": the order of a tie may differ between back ends).
//
// ---- Weights and iteration ----------------------------------------------------------------------
//   w(j, l) = exp(-|x_j - x_l|^2 / c1) exp(-D(j, l) / c2),  l in N(j)  (0 otherwise)
//   s_j = sum_l w(j, l),   dt = 1 / max_j s_j   (dt = 0 when every s_j is 0: nothing moves)
//   phi_j <- phi_j + dt sum_l w(j, l) (phi_l - phi_j),   K times, Jacobi (all j from the same phi)
// The weights are computed once, from the input phi (the noisy surface), and kept for the K
// iterations. Voxels outside the band keep their phi.
// What the iteration conserves: each update is a convex combination (1 - dt s_j) phi_j +
// dt sum_l w(j,l) phi_l with 1 - dt s_j >= 0, so (a) a constant phi on the band stays constant and
// (b) min/max of phi over the band never widen (discrete maximum principle). The band sum
// sum_j phi_j is conserved only when the weights are symmetric (w(j,l) = w(l,j): e.g. m = N - 1,
// all pairs); the top-m selection makes them asymmetric in general, so the mean may drift.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "core/Compat.hpp"
#include "core/Image.hpp"

namespace kortex {

// Where a Kokkos variant reads the candidate chunk from (gpu/SurfaceNlm*.hpp):
//   Global           - plain global-memory loads (the paper's "global memory through L1");
//   RandomAccess     - Kokkos RandomAccess trait (read-only cached path; the paper's texture);
//   ScratchBroadcast - the chunk is loaded cooperatively into team scratch and every thread reads
//                      the same value at once (the paper's constant-memory broadcast).
//   Pruned           - ScratchBroadcast over candidates sorted by patch sum: a team reads only the
//                      candidates the sum bound below leaves (not the paper's design: the first
//                      three are brute force, as the paper's Fig 4 is).
//   PrunedBlocks     - Pruned, and a candidate inside the sum window is compared only when the
//                      tighter block-sum bound below leaves it (8 numbers per record instead of p).
enum class SurfaceNlmVariant { Global, RandomAccess, ScratchBroadcast, Pruned, PrunedBlocks };
SurfaceNlmVariant parseSurfaceNlmVariant(std::string const& s);  // global|randomaccess|scratch|pruned|prunedblocks
const char* toString(SurfaceNlmVariant v);
inline std::ostream& operator<<(std::ostream& os, SurfaceNlmVariant v) { return os << toString(v); }

struct SurfaceNlmParams {
  float band = 3.0f;       // delta: |phi| <= band (voxels)
  int patch = 5;           // n: n^3 patch, odd
  int neighbors = 96;      // m
  double c1 = 400.0;       // spatial scale, voxels^2 (|x - y| = 20 voxels -> weight factor 1/e)
  // patch scale, voxels^2. 8: on the quick crops of the surface study (ICBM152 and IXI white matter,
  // noise 0.3 voxel) the mean distance to the clean surface drops 0.232 -> 0.205 and 0.222 -> 0.183;
  // with 16 it rose (0.232 -> 0.273), with 4 it barely moved (0.232 -> 0.222); c1 25..400 mattered less.
  double c2 = 8.0;
  int iterations = 10;     // K, at most kMaxIterations
  static constexpr int kMaxIterations = 100000;  // far above any useful K (the paper: 1-10); a typo would run for days
  SurfaceNlmVariant variant = SurfaceNlmVariant::Pruned;
  // Kokkos search: candidates per pass (one kernel launch each; the progress bar ticks per pass).
  // Results do not depend on it. 16384: ~11 passes of ~30 ms at N = 175k on an H200.
  int passCandidates = 16384;
  // Kokkos search: the seed pass offers each element its band neighbours j - seedRadius .. j +
  // seedRadius first (mostly spatial neighbours: similar patches), so its threshold is tight before
  // the rest. Results do not depend on it. H200, N = 175k, Pruned search: 512 -> 209 ms, 1024 -> 218,
  // 2048 -> 178, 4096 -> 181, 8192 -> 204 (a wider seed costs more than it prunes); the brute-force
  // ScratchBroadcast search measured 0.63 s with 512 and 0.64 s with 2048.
  int seedRadius = 2048;

  static constexpr int kMaxPatch = 7;       // n^3 <= 343 floats per record
  static constexpr int kMaxNeighbors = 256;

  void validate() const;  // throws InvalidArgument (one message per bad field)
};

// Two exact distances within this relative difference are a tie (see "Neighbours").
inline constexpr double kSurfaceNlmTieRelative = 1e-12;

// Strict order of candidates (D, band index).
KOKKOS_INLINE_FUNCTION bool surfaceNlmBefore(double da, std::int32_t ia, double db, std::int32_t ib) {
  return da < db || (da == db && ia < ib);
}

// ---- Float pre-selection (gpu/SurfaceNlm*.hpp) --------------------------------------------------
// The Kokkos search ranks candidates by Df, the same sum as D evaluated in float (any summation
// order, fused or not). Every term e_k^2 is >= 0, so with u = 2^-24 and p = n^3:
//   |Df - D| <= gamma * D + p * 2^-125,   gamma = (p + 3) u / (1 - (p + 3) u)
// (p - 1 roundings in the sum, 1 in the square, 2 for the rounded difference squared; the absolute
// term covers underflow and flush-to-zero of e_k^2). It keeps the m' = m + extra best by Df, then
// re-ranks them by the exact D; the result is certified when the m-th exact D is at most
// max(0, (F - p 2^-125) / (1 + gamma)), F the m'-th Df kept: every candidate left out has Df >= F,
// hence D >= that bound. An element whose certificate fails is searched again exactly (double,
// all pairs), so the neighbour sets are the spec's, ties aside.
KOKKOS_INLINE_FUNCTION double surfaceNlmFloatRelError(int patchVoxels) {
  const double u = 5.9604644775390625e-08;  // 2^-24
  const double k = double(patchVoxels + 3) * u;
  return k / (1.0 - k);
}
KOKKOS_INLINE_FUNCTION double surfaceNlmFloatAbsError(int patchVoxels) {
  return double(patchVoxels) * 2.350988701644575e-38;  // p * 2^-125
}
// Lower bound of the exact D of any candidate whose Df is >= F.
KOKKOS_INLINE_FUNCTION double surfaceNlmExactLowerBound(float F, int patchVoxels) {
  const double b = (double(F) - surfaceNlmFloatAbsError(patchVoxels)) / (1.0 + surfaceNlmFloatRelError(patchVoxels));
  return b > 0.0 ? b : 0.0;
}

// ---- Pruning by patch sums (variant Pruned) ------------------------------------------------------
// S(x) = sum_k P(x)[k]. Cauchy-Schwarz on the p differences: D(j, l) >= (S_j - S_l)^2 / p in real
// arithmetic. Computed in double in any order, each S is off by at most gamma_d A, A = sum_k |P[k]|
// <= Amax, gamma_d = p 2^-53 / (1 - p 2^-53); the spec's D (double) is at least (1 - gamma_d) times
// its real value. So a candidate whose computed |S_j - S_l| exceeds
//   R(thr) = 2 gamma_d Amax + sqrt(p thr (1 + 1e-9))
// has D > thr (the 1e-9 covers gamma_d <= 4e-14 and the roundings of R itself). The search skips
// such candidates only while j's list is full and thr is its worst kept Df (the certificate's F can
// only fall below thr later), so everything skipped has D > F >= the certified m-th exact D.
KOKKOS_INLINE_FUNCTION double surfaceNlmSumError(double maxAbsSum, int patchVoxels) {
  const double k = double(patchVoxels) * 1.1102230246251565e-16;  // p 2^-53
  return 2.0 * k / (1.0 - k) * maxAbsSum;
}
KOKKOS_INLINE_FUNCTION double surfaceNlmSumRadius(float thr, int patchVoxels, double sumError) {
  return sumError + kx::sqrt(double(patchVoxels) * double(thr) * (1.0 + 1e-9));
}

// ---- Pruning by block sums (variant PrunedBlocks: the sum bound above, then this one) ------------
// The record's P = 4 PV4 floats cut into B consecutive blocks of W float4 (W = ceil(PV4 / 8),
// B = ceil(PV4 / W) <= 8); block b holds n_b = min(4W(b + 1), p) - 4Wb > 0 voxels of the patch (the
// zero padding is the same in every record). T_b(x) = sum of block b. Cauchy-Schwarz per block:
//   D(j, l) >= LB = sum_b (T_jb - T_lb)^2 / n_b   (real arithmetic; LB >= (S_j - S_l)^2 / p).
// The T are summed in double and stored as float: each is within E = 2^-23 Amax of its real value
// (double error p 2^-53 Amax, then one float rounding of 2^-24 |T|). LB is evaluated in float with
// t_b = max(0, |fl(T_jb - T_lb)| - e), e >= 2E (1 + 2^-22) (surfaceNlmBlockMargin): each t_b is at
// most (1 + u)^2 times the real |T_jb - T_lb| - 2E, so the real LB >= LB_float / (1 + u)^(B + 7).
// Hence LB_float > thr (1 + 1e-5) implies D > thr (the 1e-5 covers (1 + u)^15, gamma_d and the float
// rounding of thr (1 + 1e-5)): such a candidate is skipped under the same rule as the sum bound's.
template <int PV4>
struct SurfaceNlmBlocks {
  static constexpr int kWidth4 = (PV4 + 7) / 8;                // float4 per block
  static constexpr int kCount = (PV4 + kWidth4 - 1) / kWidth4;  // B
  static KOKKOS_INLINE_FUNCTION int voxels(int b, int patchVoxels) {
    const int first = 4 * kWidth4 * b, end = 4 * kWidth4 * (b + 1);
    return (end < patchVoxels ? end : patchVoxels) - first;
  }
};
inline constexpr float kSurfaceNlmBlockSlack = 1.00001f;  // thr (1 + 1e-5), see above
inline float surfaceNlmBlockMargin(double maxAbsSum) {
  // 2E (1 + 2^-22) in double, rounded up into float by the extra 2^-20.
  return static_cast<float>(2.0 * 1.1920928955078125e-07 * maxAbsSum * (1.0 + 2.384185791015625e-07) *
                            (1.0 + 9.5367431640625e-07));
}
// LB_float of a query's block sums tq and a candidate's tc (inverse voxel counts invN).
template <int B>
KOKKOS_INLINE_FUNCTION float surfaceNlmBlockBound(const float (&tq)[B], const float* tc, const float (&invN)[B],
                                                  float margin) {
  float lb = 0.0f;
  KORTEX_UNROLL
  for (int b = 0; b < B; ++b) {
    float t = kx::fabs(tq[b] - tc[b]) - margin;
    t = t > 0.0f ? t : 0.0f;
    lb += t * t * invN[b];
  }
  return lb;
}

// Four floats of a record, 16-byte aligned: records are padded with zeros to a multiple of 4 so a
// patch is read with 16-byte loads; the zero padding adds exact zeros to Df.
struct alignas(16) SurfaceNlmFloat4 {
  float x, y, z, w;
};

// Df of a query patch held in registers (PV4 groups of 4) and a candidate read through `c`
// (c.load(g) returns group g): two partial sums, an order the bound above allows.
template <int PV4, class Candidate>
KOKKOS_INLINE_FUNCTION float surfaceNlmDistanceFloat(const SurfaceNlmFloat4 (&q)[PV4], Candidate const& c) {
  float s0 = 0.0f, s1 = 0.0f;
  KORTEX_UNROLL
  for (int g = 0; g < PV4; ++g) {
    const SurfaceNlmFloat4 v = c.load(g);
    const float e0 = q[g].x - v.x, e1 = q[g].y - v.y, e2 = q[g].z - v.z, e3 = q[g].w - v.w;
    s0 += e0 * e0;
    s1 += e1 * e1;
    s0 += e2 * e2;
    s1 += e3 * e3;
  }
  return s0 + s1;
}

// D of the spec: differences and squares in double from the float values, summed in k order.
template <class PtrA, class PtrB>
KOKKOS_INLINE_FUNCTION double surfaceNlmDistanceExact(PtrA const& a, PtrB const& b, int patchVoxels) {
  double s = 0.0;
  for (int k = 0; k < patchVoxels; ++k) {
    const double e = double(a[k]) - double(b[k]);
    s += e * e;
  }
  return s;
}

// Progress of a back end's run: the stage and how far it is.
struct SurfaceNlmProgressInfo {
  const char* stage = "";  // "search", "rerank", "weights", "iterate"
  int step = 0;
  int steps = 0;
};
using SurfaceNlmProgress = std::function<void(SurfaceNlmProgressInfo const&)>;

// exp(-r2 / c1 - D / c2) in double (the weights of every back end).
KOKKOS_INLINE_FUNCTION double surfaceNlmWeight(double squaredDistance, double patchDistance, double c1,
                                               double c2) {
  return kx::exp(-squaredDistance / c1 - patchDistance / c2);
}

}  // namespace kortex
