// Multiresolution gradient-adaptive filter (Kunz et al.; GPU mapping after Membarth et al.,
// "Efficient Mapping of Multiresolution Image Filtering Algorithms on Graphics Processors"):
// parameters, definitions and the per-pixel maths shared by every Kokkos variant. 2D only.
//
// Pyramid (L = levels, 1 <= L <= kMaxLevels):
//   sizes     n_0 = input extent, n_{k+1} = ceil(n_k / 2), per axis. Level k+1 exists only if
//             both axes of level k have at least 2 pixels: levelsFit() / maxLevels().
//   decompose g_0 = input; g_{k+1} = reduce(g_k); l_k = g_k - expand_k(g_{k+1}), k = 0 .. L-1.
//   filter    l'_k = BF(l_k) for k < L, and g'_L = BF(g_L) (BF below).
//   reconstruct g'_k = l'_k + expand_k(g'_{k+1}), k = L-1 .. 0; the output is g'_0.
//
// reduce (5-tap binomial lowpass, then keep every second sample):
//   g_{k+1}(i, j) = sum_{m,n = -2..2} b(m) b(n) g_k(clamp(2i + m), clamp(2j + n)),
//   b = (1, 4, 6, 4, 1) / 16, clamp to the extent of level k (core/Boundary.hpp rule).
// expand_k (to the size of level k from level k+1 of size m per axis): zero insertion, the same
//   5-tap binomial lowpass, times 4, on the coarse image extended by the clamp rule. Per axis this
//   is the polyphase form (coarse indices clamped to [0, m-1]):
//     even p = 2i:     (g(i-1) + 6 g(i) + g(i+1)) / 8
//     odd  p = 2i + 1: (g(i) + g(i+1)) / 2
//   and the 2D expand is the product of the two axes' taps (separable). Every output is a convex
//   combination of coarse samples: a constant image expands to the same constant.
// BF (on every layer; core/Bilateral.hpp with d = 2):
//   out(p) = sum_{o in W} c(o) s(l(p+o) - l(p)) l(p+o) / sum_{o in W} c(o) s(...),
//   W = {-r..r}^2, c(o) = exp(-|o|^2 / (2 sigma_s^2)) (closeness), s(d) = exp(-d^2 / (2 sigma_r^2))
//   (similarity), samples clamped at the layer's border. The same r, sigma_s, sigma_r on every
//   layer. (BF on a layer smaller than the window is well defined through the clamp rule.)
//
// Float pipeline (float input): every layer is float; no clamping of the output.
// Integer pipeline (16-bit input holding `bits`-bit data, 1 <= bits <= 15, e.g. the paper's
// 10-bit data): every layer holds integers (int16) and every step is integer arithmetic, so CPU
// and Kokkos results are bit-identical:
//   reduce:  g_{k+1} = (S + 128) >> 8, S = sum b'(m) b'(n) g with b' = (1, 4, 6, 4, 1)  (S >= 0)
//   expand:  e = (T + 32) >> 6, T = sum a(m) a(n) g with per-axis integer weights a = (1, 6, 1)
//            (even p) or (4, 4) (odd p)  (T >= 0 since every level read by expand is >= 0)
//   l_k = g_k - e (|l_k| <= maxValue, fits int16)
//   BF with fixed-point weights from two tables (multiresClosenessQ / multiresSimilarityQ):
//     cQ(o) = round(kMultiresWeightOne * exp(-|o|^2 / (2 sigma_s^2)))
//     sQ(d) = round(kMultiresWeightOne * exp(-d^2 / (2 sigma_r^2))), d = |integer difference|
//     w = cQ * sQ (<= 2^30), num = sum w l (int64), den = sum w (int64, >= 2^30: centre tap)
//     out = multiresRoundDiv(num, den) (nearest integer, halves away from zero)
//   reconstruct: g'_k = clamp(l'_k + e, 0, maxValue) with maxValue = 2^bits - 1 (every level is
//   an image of that bit depth); the output is g'_0 as uint16. Without filtering, decompose +
//   reconstruct returns the input exactly (g'_k = l_k + e = g_k, already inside the range).
//   Input values above maxValue are refused (InvalidArgument).
//
// Variants (MultiresParams):
//   PyramidVariant (decompose / reconstruct kernels):
//     Unfused     - separate kernels: reduce; upsample (zero insertion), lowpass, scale by 4, and
//                   the subtraction / addition, as the paper's baseline.
//     FusedDirect - one kernel per level computes l_k = g_k - expand(g_{k+1}) (and g'_k), each
//                   thread writing its outputs straight to global memory.
//     FusedExpand - the fused kernel with the outputs of a team staged in team scratch and
//                   written back as contiguous rows (the paper's "fused + shared memory").
//     Packed16    - integer pipeline only: the fused kernels reading and writing two 16-bit
//                   pixels per 32-bit word.
//     FusedReduce - decompose's reduce and Laplacian in one kernel per level: a team loads its fine
//                   tile with the apron of the reduce and the expand into scratch, forms g_{k+1} on
//                   the coarse tile plus a 1-pixel apron there, then l_k (one read of g_k per level
//                   and one launch fewer); reconstruct as FusedDirect.
//   MultiresBilateralVariant (layer filter):
//     Naive                  - exp for both Gaussians, per tap (float pipeline).
//     ClosenessLut           - closeness from a (2r+1)^2 table in team scratch; similarity exp
//                              (float pipeline).
//     ClosenessSimilarityLut - integer pipeline: both fixed-point tables above, the similarity
//                              table indexed by the integer intensity difference.
//     FastMath               - as Naive with the device's fast intrinsic exp (CUDA __expf; the
//                              standard exp on host backends) (float pipeline).
//     Reuse                  - several outputs per thread along y share every input row they
//                              read, and each tap's two Gaussians are one exp2Flush of the summed
//                              exponent (core/FastMath.hpp: one MUFU.EX2 on CUDA) (float pipeline).
//   The float pipeline accepts Naive, ClosenessLut, FastMath, Reuse; the integer pipeline accepts
//   ClosenessSimilarityLut; any other pair is refused with InvalidArgument.
#pragma once

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/FastMath.hpp"
#include "core/Image.hpp"

namespace kortex {

enum class PyramidVariant { Unfused, FusedDirect, FusedExpand, Packed16, FusedReduce };
enum class MultiresBilateralVariant { Naive, ClosenessLut, ClosenessSimilarityLut, FastMath, Reuse };

// "unfused" | "fused" | "fused-expand" | "packed16" | "fused-reduce"
PyramidVariant parsePyramidVariant(std::string const& s);
const char* toString(PyramidVariant v);
// "naive" | "closeness-lut" | "lut" (closeness + similarity) | "fastmath"
MultiresBilateralVariant parseMultiresBilateralVariant(std::string const& s);
const char* toString(MultiresBilateralVariant v);
inline std::ostream& operator<<(std::ostream& os, PyramidVariant v) { return os << toString(v); }
inline std::ostream& operator<<(std::ostream& os, MultiresBilateralVariant v) { return os << toString(v); }

// Kernel shapes; 0 means "ask the tuning database, else the documented default".
struct MultiresTiles {
  int bilateralX = 0, bilateralY = 0;  // layer bilateral: outputs per team (x, y)
  int pyramidX = 0, pyramidY = 0;      // fused expand kernels: coarse pixels per team (x, y)
};

struct MultiresParams {
  int levels = 5;                 // L: Laplacian layers l_0 .. l_{L-1}, plus g_L
  int radius = 2;                 // BF window (2r+1)^2: 5x5 as in the paper
  float sigmaSpatial = 2.0f;      // sigma_d of the paper, pixels
  float sigmaRange = 0.05f;       // intensity units (float) or grey levels (integer)
  int bits = 0;                   // integer pipeline: data bit depth (0: smallest that holds the input max)
  bool filter = true;             // false: decompose + reconstruct only (tests, benchmarks)
  // Kokkos: filter the layers on concurrent execution-space instances. Off by default: measured
  // on H200 (bench multires, Table 2, float) it does not pay: 512^2 7774 FPS concurrent vs 8898
  // in order, 1024^2 6315 vs 6532, 2048^2 3166 vs 3166, 4096^2 1047 vs 1042 (the small levels
  // take microseconds; the instances' extra fences cost as much).
  bool concurrentLevels = false;
  // Default FusedDirect: measured on H200 (bench multires, Fig 5, float 4096^2) decompose 0.189 ms
  // and reconstruct 0.100 ms vs FusedExpand's 0.229 / 0.144 ms (staging through scratch does not
  // pay on Hopper, whose caches merge the stride-2 stores); equal at 512^2. FusedReduce (the same
  // bits) decomposes 4096^2 in 0.2145-0.2156 ms against 0.180-0.181 and wins only on small images
  // (Table 2 float, git 0f4e101: 512^2 14089 vs 12276 FPS, 4096^2 1907 vs 2032;
  // bench/results/kernels43_session57_nvidia-h200.md).
  PyramidVariant pyramid = PyramidVariant::FusedDirect;
  // Default Reuse (float pipeline; the integer pipeline takes ClosenessSimilarityLut): measured on H200
  // (bench multires, Table 2, float 4096^2, git b80313b + the device fix of reuseItems) 1607 FPS
  // against ClosenessLut's 1132, exact against the CPU reference within the harness bounds on Cuda.
  MultiresBilateralVariant bilateral = MultiresBilateralVariant::Reuse;
  MultiresTiles tiles;

  static constexpr int kMaxLevels = 16;
  static constexpr int kMaxRadius = 16;
  static constexpr int kMaxBits = 15;

  // Checks independent of the image (InvalidArgument): levels in [1, kMaxLevels], radius in
  // [0, kMaxRadius], sigmas finite and > 0 (sigmaRange may be +inf), bits in {0} U [1, 15],
  // tiles >= 0.
  void validate() const;
  // validate() plus: a 2D image (nz == 1), not empty, and `levels` fit (levelsFit).
  void validateFor(Geometry const& g) const;
  // Pipeline/variant pair (integer: ClosenessSimilarityLut; float: the others; Packed16 only
  // integer).
  void validateVariants(bool integerPipeline) const;
};

// Level sizes: sizes[k] = {nx_k, ny_k}, k = 0 .. levels.
struct LevelSize {
  Index nx = 0, ny = 0;
};
std::vector<LevelSize> levelSizes(Index nx, Index ny, int levels);
// Largest L for which every level k < L has both axes >= 2 (0 for a 1-pixel-wide image).
int maxLevels(Index nx, Index ny);
inline bool levelsFit(Index nx, Index ny, int levels) { return levels <= maxLevels(nx, ny); }

// ---- per-pixel maths (float pipeline) -------------------------------------------------------

// 5-tap binomial weights b(m), m = -2..2, as floats (exact in binary).
KOKKOS_INLINE_FUNCTION float binomial5(int m) {
  return m == 0 ? 0.375f : ((m == 1 || m == -1) ? 0.25f : 0.0625f);
}

// Expand taps along one axis for fine index p, coarse extent m: up to 3 clamped coarse indices
// and their weights (odd p: the third weight is 0 and its index repeats the second).
struct ExpandTaps {
  int idx[3];
  float w[3];
  int iw[3];  // integer weights (sum 8)
};
KOKKOS_INLINE_FUNCTION ExpandTaps expandTaps(int p, int m) {
  ExpandTaps t;
  const int i = p >> 1;
  if ((p & 1) == 0) {
    t.idx[0] = clampIndex(i - 1, m);
    t.idx[1] = clampIndex(i, m);
    t.idx[2] = clampIndex(i + 1, m);
    t.w[0] = 0.125f; t.w[1] = 0.75f; t.w[2] = 0.125f;
    t.iw[0] = 1; t.iw[1] = 6; t.iw[2] = 1;
  } else {
    t.idx[0] = clampIndex(i, m);
    t.idx[1] = clampIndex(i + 1, m);
    t.idx[2] = t.idx[1];
    t.w[0] = 0.5f; t.w[1] = 0.5f; t.w[2] = 0.0f;
    t.iw[0] = 4; t.iw[1] = 4; t.iw[2] = 0;
  }
  return t;
}

// ---- pyramid kernels, per pixel (Kokkos kernels: gpu/multires/detail/MultiresPyramidKernels.hpp) ---------------
// Float forms are centred (a sample plus weighted differences), algebraically the definitions
// above: a constant level reduces and expands to the same constant bit for bit. Integer forms
// are the exact sums of the integer pipeline (any summation order gives the same result).

// Integer binomial weights b'(m) = 16 b(m) = (1, 4, 6, 4, 1), m = -2..2.
KOKKOS_INLINE_FUNCTION int binomial5Q(int m) {
  return m == 0 ? 6 : ((m == 1 || m == -1) ? 4 : 1);
}
// Integer rounding: reduce (S + 128) >> 8 with S = sum b'(m) b'(n) g (256 x the mean);
// expand (T + 32) >> 6 with T = sum a(m) a(n) g (64 x the value). S, T >= 0.
KOKKOS_INLINE_FUNCTION int multiresReduceRound(int s) { return (s + 128) >> 8; }
KOKKOS_INLINE_FUNCTION int multiresExpandRound(int t) { return (t + 32) >> 6; }
// Reconstruct clamp of the integer pipeline: [0, maxValue].
KOKKOS_INLINE_FUNCTION int multiresClampValue(int v, int maxValue) {
  return v < 0 ? 0 : (v > maxValue ? maxValue : v);
}

// reduce at coarse pixel (row i, column j) of a fine level of ny x nx pixels read as g(y, x)
// (any 2D view), clamp rule on the fine level. Float: centre g(2i, 2j) plus the binomial sum of
// the differences, rows first. Integer: (S + 128) >> 8.
template <class Fine>
KOKKOS_INLINE_FUNCTION float multiresReduceAt(Fine const& g, int i, int j, int ny, int nx) {
  const float c = static_cast<float>(g(2 * i, 2 * j));  // 2i <= ny - 1, 2j <= nx - 1
  float acc = 0.0f;
  for (int m = -2; m <= 2; ++m) {
    const int y = clampIndex(2 * i + m, ny);
    float row = 0.0f;
    for (int n = -2; n <= 2; ++n)
      row += binomial5(n) * (static_cast<float>(g(y, clampIndex(2 * j + n, nx))) - c);
    acc += binomial5(m) * row;
  }
  return c + acc;
}
template <class Fine>
KOKKOS_INLINE_FUNCTION int multiresReduceAtQ(Fine const& g, int i, int j, int ny, int nx) {
  int s = 0;
  for (int m = -2; m <= 2; ++m) {
    const int y = clampIndex(2 * i + m, ny);
    int row = 0;
    for (int n = -2; n <= 2; ++n)
      row += binomial5Q(n) * static_cast<int>(g(y, clampIndex(2 * j + n, nx)));
    s += binomial5Q(m) * row;
  }
  return multiresReduceRound(s);
}

// expand along one axis, centred (float) or as 8x the value (integer):
//   even fine index from coarse (g(i-1), g(i), g(i+1)), odd from (g(i), g(i+1)).
KOKKOS_INLINE_FUNCTION float multiresExpandEven(float a, float b, float c) {
  return b + 0.125f * ((a - b) + (c - b));
}
KOKKOS_INLINE_FUNCTION float multiresExpandOdd(float b, float c) { return b + 0.5f * (c - b); }
KOKKOS_INLINE_FUNCTION int multiresExpandEvenQ(int a, int b, int c) { return a + 6 * b + c; }
KOKKOS_INLINE_FUNCTION int multiresExpandOddQ(int b, int c) { return 4 * (b + c); }

// The 2x2 fine outputs of coarse pixel (i, j): q[a][b] = expand at fine (2i + a, 2j + b), from
// its 3x3 neighbourhood n[r][c] = g(clamp(i - 1 + r), clamp(j - 1 + c)). Separable: rows first.
KOKKOS_INLINE_FUNCTION void multiresExpandQuad(const float (&n)[3][3], float (&q)[2][2]) {
  float ev[3], od[3];
  for (int r = 0; r < 3; ++r) {
    ev[r] = multiresExpandEven(n[r][0], n[r][1], n[r][2]);
    od[r] = multiresExpandOdd(n[r][1], n[r][2]);
  }
  q[0][0] = multiresExpandEven(ev[0], ev[1], ev[2]);
  q[0][1] = multiresExpandEven(od[0], od[1], od[2]);
  q[1][0] = multiresExpandOdd(ev[1], ev[2]);
  q[1][1] = multiresExpandOdd(od[1], od[2]);
}
KOKKOS_INLINE_FUNCTION void multiresExpandQuadQ(const int (&n)[3][3], int (&q)[2][2]) {
  int ev[3], od[3];
  for (int r = 0; r < 3; ++r) {
    ev[r] = multiresExpandEvenQ(n[r][0], n[r][1], n[r][2]);
    od[r] = multiresExpandOddQ(n[r][1], n[r][2]);
  }
  q[0][0] = multiresExpandRound(multiresExpandEvenQ(ev[0], ev[1], ev[2]));
  q[0][1] = multiresExpandRound(multiresExpandEvenQ(od[0], od[1], od[2]));
  q[1][0] = multiresExpandRound(multiresExpandOddQ(ev[1], ev[2]));
  q[1][1] = multiresExpandRound(multiresExpandOddQ(od[1], od[2]));
}

// expand at one fine pixel (integer) from the per-axis taps (expandTaps) of its row and column,
// coarse level read as g(y, x): multiresExpandRound(sum a(m) a(n) g).
template <class Coarse>
KOKKOS_INLINE_FUNCTION int multiresExpandAtQ(Coarse const& g, ExpandTaps const& ty,
                                             ExpandTaps const& tx) {
  int t = 0;
  for (int a = 0; a < 3; ++a) {
    int row = 0;
    for (int b = 0; b < 3; ++b) row += tx.iw[b] * static_cast<int>(g(ty.idx[a], tx.idx[b]));
    t += ty.iw[a] * row;
  }
  return multiresExpandRound(t);
}

// Unfused expand (zero insertion, lowpass, x4), for a fine level of ny x nx pixels from a coarse
// level of my x mx:
//  upsample: U(Y, X), Y in [0, ny + 4), X in [0, nx + 4) (a margin of 2 on every side), holds
//            the coarse sample g(clamp(p / 2), clamp(q / 2)) where both fine indices p = Y - 2,
//            q = X - 2 are even and 0 elsewhere: the clamp-extended coarse image with zeros
//            inserted, so the lowpass below never clamps.
//  lowpass:  at fine (y, x) the 5x5 binomial over U(y .. y + 4, x .. x + 4), rows first; float:
//            sum b(m) b(n) U, integer: T = sum b'(m) b'(n) U (= the T of the polyphase form:
//            the non-zero taps of U carry the weights (1, 6, 1) or (4, 4) per axis).
//  scale:    float 4 x lowpass; integer multiresExpandRound(T).
template <class Coarse>
KOKKOS_INLINE_FUNCTION auto multiresUpsampleAt(Coarse const& g, int Y, int X, int my, int mx) {
  using V = typename Coarse::non_const_value_type;
  const int p = Y - 2, q = X - 2;
  if ((p & 1) != 0 || (q & 1) != 0) return V(0);
  return static_cast<V>(g(clampIndex(p / 2, my), clampIndex(q / 2, mx)));
}
template <class Up>
KOKKOS_INLINE_FUNCTION float multiresLowpassAt(Up const& u, int y, int x) {
  float acc = 0.0f;
  for (int m = 0; m < 5; ++m) {
    float row = 0.0f;
    for (int n = 0; n < 5; ++n) row += binomial5(n - 2) * static_cast<float>(u(y + m, x + n));
    acc += binomial5(m - 2) * row;
  }
  return acc;
}
template <class Up>
KOKKOS_INLINE_FUNCTION int multiresLowpassAtQ(Up const& u, int y, int x) {
  int acc = 0;
  for (int m = 0; m < 5; ++m) {
    int row = 0;
    for (int n = 0; n < 5; ++n) row += binomial5Q(n - 2) * static_cast<int>(u(y + m, x + n));
    acc += binomial5Q(m - 2) * row;
  }
  return acc;
}
KOKKOS_INLINE_FUNCTION float multiresScaleExpand(float lowpass) { return 4.0f * lowpass; }
KOKKOS_INLINE_FUNCTION int multiresScaleExpandQ(int lowpassT) { return multiresExpandRound(lowpassT); }
// ---- end of the pyramid block ------------------------------------------------------------------

// Gaussian factors of the float BF: exp(-d2 / (2 sigma^2)) = exp(d2 * negHalfInvSigma2).
KOKKOS_INLINE_FUNCTION float multiresGauss(float d2, float negHalfInvSigma2) {
  return kx::exp(d2 * negHalfInvSigma2);
}

// ---- integer pipeline -----------------------------------------------------------------------

inline constexpr std::int32_t kMultiresWeightOne = 1 << 15;  // fixed-point 1.0 of the tables

// Nearest integer to num / den (den > 0), halves away from zero.
KOKKOS_INLINE_FUNCTION std::int64_t multiresRoundDiv(std::int64_t num, std::int64_t den) {
  return num >= 0 ? (num + den / 2) / den : -((-num + den / 2) / den);
}

// Closeness table: (2r+1)^2 entries, index (dy + r) * (2r+1) + (dx + r). Computed in double on
// the host: round(kMultiresWeightOne * exp(-(dx^2 + dy^2) / (2 sigma_s^2))).
std::vector<std::int32_t> multiresClosenessQ(int radius, float sigmaSpatial);
// Similarity table for |difference| d = 0 .. size-1, where size = min(maxDiff + 1, first d whose
// entry rounds to 0) (entries past the end are 0): round(kMultiresWeightOne * exp(-d^2 / (2 sigma_r^2))).
// sigma_r = +inf gives maxDiff + 1 entries of kMultiresWeightOne.
std::vector<std::int32_t> multiresSimilarityQ(float sigmaRange, int maxDiff);
// Closeness as floats for the ClosenessLut variant (float pipeline), same layout.
std::vector<float> multiresCloseness(int radius, float sigmaSpatial);

// Smallest bit depth (>= 1) whose range [0, 2^bits - 1] holds maxValue.
int bitsFor(std::uint32_t maxValue);

// ---- layer bilateral, per tap and per pixel (Kokkos kernels: gpu/multires/detail/MultiresBilateralKernels.hpp) ---
// Float BF weights: c(o) = exp(|o|^2 * closeness), s(d) = exp(d^2 * similarity), with the
// coefficients -1 / (2 sigma^2) computed in double and rounded to float once. sigma_r = +inf
// gives similarity = 0, so s(d) = exp(0) = 1 for every finite difference. The centre tap has
// weight exactly 1 in every variant: exp(0) = 1 for the standard exp and for __expf, and the
// closeness tables hold exp(0) = 1 (float) / kMultiresWeightOne (fixed point).
// Reuse: the same coefficients times log2(e) (closenessLog2, similarityLog2), so that a tap's weight is
// one exp2Flush(|o|^2 closenessLog2 + d^2 similarityLog2) = c(o) s(d) (within 2 ulp of the exponent).
struct MultiresBFCoeffs {
  float closeness = -0.5f;
  float similarity = -0.5f;
  float closenessLog2 = -0.7213475f;
  float similarityLog2 = -0.7213475f;
};
inline MultiresBFCoeffs multiresBFCoeffs(float sigmaSpatial, float sigmaRange) {
  constexpr double log2e = 1.4426950408889634074;
  MultiresBFCoeffs c;
  const double cs = -1.0 / (2.0 * double(sigmaSpatial) * double(sigmaSpatial));
  const double cr = sigmaRange == std::numeric_limits<float>::infinity()
                        ? 0.0
                        : -1.0 / (2.0 * double(sigmaRange) * double(sigmaRange));
  c.closeness = static_cast<float>(cs);
  c.similarity = static_cast<float>(cr);
  c.closenessLog2 = static_cast<float>(cs * log2e);
  c.similarityLog2 = static_cast<float>(cr * log2e);
  return c;
}
// Naive / ClosenessLut: the standard exp (kx::exp).
KOKKOS_INLINE_FUNCTION float multiresClosenessWeight(int dist2, float coeff) {
  return multiresGauss(static_cast<float>(dist2), coeff);
}
KOKKOS_INLINE_FUNCTION float multiresSimilarityWeight(float diff, float coeff) {
  return multiresGauss(diff * diff, coeff);
}
// Reuse: the tap's weight c(o) s(d) as one exp2Flush; `closenessTerm` = |o|^2 closenessLog2.
KOKKOS_INLINE_FUNCTION float multiresWeightReuse(float closenessTerm, float diff, float similarityLog2) {
  return exp2Flush(closenessTerm + diff * diff * similarityLog2);
}
// FastMath: the same with fastExp (__expf on CUDA).
KOKKOS_INLINE_FUNCTION float multiresClosenessWeightFast(int dist2, float coeff) {
  return fastExp(static_cast<float>(dist2) * coeff);
}
KOKKOS_INLINE_FUNCTION float multiresSimilarityWeightFast(float diff, float coeff) {
  return fastExp(diff * diff * coeff);
}
// Float result in centred form: out = centre + sum w (l(q) - l(p)) / sum w, algebraically the
// BF definition (sum w l / sum w); a constant layer comes out bit for bit, and the sums carry
// the small differences instead of the values. sumW >= 1 (centre tap).
KOKKOS_INLINE_FUNCTION float multiresBFResult(float centre, float sumWD, float sumW) {
  return centre + sumWD / sumW;
}
// Integer BF: similarity weight sQ(d) for |difference| d >= 0 from a table of `size` entries
// (a View or any type with operator()(int)); 0 past the end.
template <class Table>
KOKKOS_INLINE_FUNCTION std::int32_t multiresSimilarityQAt(Table const& table, int size, int absDiff) {
  return absDiff < size ? table(absDiff) : 0;
}
// Tap weight w = cQ * sQ (<= 2^30 for the tables above, fits int32).
KOKKOS_INLINE_FUNCTION std::int32_t multiresWeightQ(std::int32_t cQ, std::int32_t sQ) {
  return cQ * sQ;
}
// Integer result multiresRoundDiv(num, den) as int16 (a convex combination of int16 samples).
// den >= 2^30 with the tables above (centre tap); den == 0 can only come from hand-made tables
// with a zero centre weight and returns the centre sample instead of dividing by zero.
KOKKOS_INLINE_FUNCTION std::int16_t multiresBFResultQ(std::int64_t num, std::int64_t den,
                                                      std::int16_t centre) {
  return den > 0 ? static_cast<std::int16_t>(multiresRoundDiv(num, den)) : centre;
}
// ---- end of the layer bilateral block ---------------------------------------------------------

// Layer and image types. Layers are 2D views (ny, nx); images keep core/Image.hpp's (nz, ny, nx)
// with nz == 1.
template <class Mem = Kokkos::HostSpace>
using LayerView = Kokkos::View<float**, Kokkos::LayoutRight, Mem>;
template <class Mem = Kokkos::HostSpace>
using IntLayerView = Kokkos::View<std::int16_t**, Kokkos::LayoutRight, Mem>;
template <class Mem = Kokkos::HostSpace>
using U16ImageView = Kokkos::View<std::uint16_t***, Kokkos::LayoutRight, Mem>;
template <class Mem = Kokkos::HostSpace>
using ConstU16ImageView = Kokkos::View<const std::uint16_t***, Kokkos::LayoutRight, Mem>;

}  // namespace kortex
