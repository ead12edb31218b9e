// NLM variant BoxSum: patch distances as separable box sums, tile by tile, offset batch by
// offset batch, all inside team scratch. The cost per (voxel, offset) does not depend on the
// patch size: a handful of scratch accesses, a few adds, one exp.
//
// Why it is exact: every sample is clamped independently (core/Nlm.hpp), so for one search
// offset o, D(x,o) = sum_{p in P} S_o(x+p) with S_o(q) = (I(c(q)) - I(c(q+o)))^2 at unclamped q:
// a box sum of S_o, separable into a sum along y, then x, then z.
//
// One team owns a tile of TX x TY x TZ outputs (TZ = 1 in 2D). For each offset batch -- B
// consecutive values of o_y at fixed (o_z, o_x) -- it runs three passes separated by barriers:
//   P1 (y sums): one work item per column (x', z') of the tile grown by the patch halo in x and
//      z, per segment of K1 outputs along y and per group of at most BMAX offsets. The item
//      keeps the centre column c[K1 + 2r] and the shifted column s[K1 + 2r + BMAX - 1] in
//      registers: offset o_y + b reads s[b .. b + K1 + 2r), so a group of offsets costs
//      2 (K1 + 2r) + BMAX - 1 reads of the input (global memory through the cache, clamping only
//      at the image border; lanes walk along x, so loads are coalesced). It writes
//      V_b(x', y, z') = sum over the y-window of S, for every b.
//   P2 (x sums, in place): one item per row of V_b; a streaming window sum over the row.
//   P3 (z sums, weights): one item per (x, y) column and segment of K3 outputs along z: z-window
//      sums of V_b give D, then w = exp(-D / (|P| h^2)) (1 for o = 0, explicitly), the weighted
//      sample I(c(x+o)) from global memory, and the sums sum w, sum w (I(x+o) - I(x)) of its K3
//      outputs: float in registers over the batch, added to double totals in scratch after it.
// (In 2D this kernel runs only for r = 0 and r >= 4, and P3 has no z sum.) The last step writes
// out = I(x) + sum w (I(x+o) - I(x)) / sum w.
//
// Precision: window sums are never formed as running sums (add the new sample, subtract the
// old one): after a large value left the window, such a sum keeps an absolute error of
// ~eps * (that value), which ruins the small distances that carry the weight. All window sums
// here are van Herk / Gil-Werman block sums: the line is cut into blocks of the window length
// W = 2r + 1, and each window sum is (suffix sum of one block) + (prefix sum of the next), i.e.
// a sum of non-negative terms with at most W - 1 + 1 additions: relative error ~W * eps, as for
// the naive sum, at ~3 adds per output whatever W. These sums need no double precision (FP64
// and float<->double conversions run at 1/2 and 1/4 of the FP32 rate on H100/H200); only the
// per-output totals across batches are double (detail/NlmCommon.hpp: accumulation precision).
//
// Compile-time specialisation: 2D/3D, and the patch radius PR in {1, 2, 3} (register arrays of
// K1 + 2r and K3 + 2r floats, fully unrolled). Other radii (r = 0 and r >= 4) use PR = 0: the same
// passes with plain loops over the runtime radius (direct window sums, 2r+1 reads per output).
// In 2D with PR in {1, 2, 3} a leaner two-pass kernel runs instead (BoxSum2DKernel, below): the
// whole input apron fits in scratch there.
//
// Measured (H200, Kokkos 4.6.99 CUDA, median of 5-20 runs, h = 0.1): 2D 1024^2, r = 3, R = 8:
// 0.63 ms (Naive 20.0 ms); 2D r = 2, R = 5: 0.26 ms; 3D 256^3, r = 2, R = 5: 80 ms. Both kernels
// are instruction-issue bound (IPC ~3 of 4): in 2D ~51 instructions per (voxel, offset), of which
// 11 are the expf of nlmWeight and ~3 the double totals; in 3D ~75, mostly the halo work of the
// three exchange passes, which the 40,936 B scratch limit keeps small tiles from amortising.
//
// Scratch: 2 x TX x TY x TZ double totals + V (B x (TZ + 2r_z) x TY x pitch floats, pitch =
// TX + 2r rounded up to an odd number so the rows that P2 walks fall on distinct banks).
// Device memory: none beyond input and output.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "gpu/nlm/detail/NlmCommon.hpp"

namespace kortex::gpu::nlm_detail {

// out[k] = v[k] + ... + v[k + W - 1] for k in [0, N - W], by block prefix/suffix sums (every
// result is a sum of non-negative partial sums when v >= 0: no cancellation).
template <int N, int W>
KOKKOS_FORCEINLINE_FUNCTION void windowSums(float const (&v)[N], float (&out)[N - W + 1]) {
  static_assert(W >= 1 && N >= W, "windowSums: bad sizes");
  float pre[N], suf[N];
  KORTEX_UNROLL
  for (int i = 0; i < N; ++i) pre[i] = (i % W == 0) ? v[i] : pre[i - 1] + v[i];
  KORTEX_UNROLL
  for (int i = N - 1; i >= 0; --i)
    suf[i] = (i % W == W - 1 || i == N - 1) ? v[i] : v[i] + suf[i + 1];
  KORTEX_UNROLL
  for (int k = 0; k <= N - W; ++k) out[k] = (k % W == 0) ? suf[k] : suf[k] + pre[k + W - 1];
}

// In place: row[i] <- row[i] + ... + row[i + W - 1] for i in [0, n); the row holds n + W - 1
// values. Streams blocks of W values: (suffix of block j) + (prefix of block j + 1). Block j + 1
// is read before any of block j is overwritten. The main loop runs over whole blocks without
// bounds checks; the last, partial block is handled once.
template <int W>
KOKKOS_FORCEINLINE_FUNCTION void windowSumsInPlace(float* row, const int n) {
  const int nv = n + W - 1;
  float suf[W];
  {
    float v[W];
    KORTEX_UNROLL
    for (int t = 0; t < W; ++t) v[t] = row[t];
    suf[W - 1] = v[W - 1];
    KORTEX_UNROLL
    for (int t = W - 2; t >= 0; --t) suf[t] = v[t] + suf[t + 1];
  }
  int j = 0;
  float* blk = row;  // block j
  for (; (j + 2) * W <= nv; ++j, blk += W) {  // block j + 1 complete: every output of block j exists
    float v[W], pre[W];
    KORTEX_UNROLL
    for (int t = 0; t < W; ++t) v[t] = blk[W + t];
    pre[0] = v[0];
    KORTEX_UNROLL
    for (int t = 1; t < W; ++t) pre[t] = pre[t - 1] + v[t];
    blk[0] = suf[0];
    KORTEX_UNROLL
    for (int t = 1; t < W; ++t) blk[t] = suf[t] + pre[t - 1];
    suf[W - 1] = v[W - 1];
    KORTEX_UNROLL
    for (int t = W - 2; t >= 0; --t) suf[t] = v[t] + suf[t + 1];
  }
  if (j * W < n) {  // tail: block j + 1 is partial (values up to nv - 1)
    const int base = (j + 1) * W;
    float pre = 0.0f;
    row[j * W] = suf[0];
    KORTEX_UNROLL
    for (int t = 1; t < W; ++t) {
      if (base + t - 1 < nv) pre += row[base + t - 1];
      if (j * W + t < n) row[j * W + t] = suf[t] + pre;
    }
  }
}

// v[i] = column[clamp(y + i) * stride] for i < N: no clamping when the whole run is inside.
template <int N>
KOKKOS_FORCEINLINE_FUNCTION void loadRun(const float* column, int y, int n, int stride,
                                         float (&v)[N]) {
  if (y >= 0 && y + N <= n) {
    const float* p = column + static_cast<std::ptrdiff_t>(y) * stride;
    KORTEX_UNROLL
    for (int i = 0; i < N; ++i) v[i] = p[static_cast<std::ptrdiff_t>(i) * stride];
  } else {
    KORTEX_UNROLL
    for (int i = 0; i < N; ++i) v[i] = column[static_cast<std::ptrdiff_t>(clampIndex(y + i, n)) * stride];
  }
}

// Tile and batch of one launch. Zero fields are chosen automatically (see chooseBoxSumConfig).
struct BoxSumConfig {
  int tx = 0, ty = 0, tz = 0;  // outputs per team along x, y, z
  int batch = 0;               // offsets (consecutive o_y) per pass triple
  int teamSize = 0;            // threads per team (capped by the backend's recommendation)
};

template <int Dim, int PR>
struct BoxSumShape {
  // Outputs per P1 item along y / per P3 item along z (PR > 0 runs in 3D only; 2D uses
  // BoxSum2DKernel). K1 = K3 = 4: the 2r halo of the strips costs 2x for r = 2, longer strips need
  // taller tiles, which the scratch limit does not leave room for (see chooseBoxSumConfig).
  static constexpr int K1 = PR > 0 ? 4 : 1;
  static constexpr int K3 = (Dim == 3 && PR > 0) ? 4 : 1;
  // Offsets per P1 item (its loop over them is unrolled: the shifted column s[] holds
  // K1 + 2r + BMAX - 1 samples and offset b reads s[b .. b + K1 + 2r), no register moves).
  static constexpr int BMAX = PR > 0 ? 8 : 1;
};

template <int Dim, int PR, class ExecSpace>
struct BoxSumKernel {
  using memory_space = typename ExecSpace::memory_space;
  using policy_type = Kokkos::TeamPolicy<ExecSpace>;
  using member_type = typename policy_type::member_type;
  using scratch_view = Kokkos::View<float*, typename ExecSpace::scratch_memory_space,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using acc_view = Kokkos::View<double*, typename ExecSpace::scratch_memory_space,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr int K1 = BoxSumShape<Dim, PR>::K1;
  static constexpr int K3 = BoxSumShape<Dim, PR>::K3;
  static constexpr int W = 2 * PR + 1;  // window length (PR > 0)
  static constexpr int W1 = K1 + 2 * PR;
  static constexpr int W3 = K3 + (Dim == 3 ? 2 * PR : 0);

  InputView<memory_space> in;
  ImageView<memory_space> out;
  Problem pb;
  int tx, ty, tz, batch;
  int tilesX, tilesY;
  int pitch;   // row pitch of V (odd)
  int planes;  // z planes of V: tz + 2 r_z
  int groups;  // P1 splits each batch into this many groups of offsets (more parallel items)
  // Divisors of the work-item decompositions: tx + 2r, planes, ty / K1, tx, ty.
  FastDivisor dXp, dPlanes, dSeg, dTx, dTy;

  KOKKOS_INLINE_FUNCTION std::size_t vSize() const {
    return static_cast<std::size_t>(batch) * planes * ty * pitch;
  }
  KOKKOS_INLINE_FUNCTION std::size_t accSize() const { return static_cast<std::size_t>(tx) * ty * tz; }
  KOKKOS_INLINE_FUNCTION std::size_t bStride() const { return static_cast<std::size_t>(planes) * ty * pitch; }

  // Items of P1 for a batch of nb offsets: every column is split into groups of at most BMAX
  // offsets, and into more groups (up to one offset each) while the team has idle threads.
  KOKKOS_INLINE_FUNCTION int p1Groups(int nb) const {
    const int minGroups = (nb + BoxSumShape<Dim, PR>::BMAX - 1) / BoxSumShape<Dim, PR>::BMAX;
    const int g = groups < nb ? groups : nb;
    return g > minGroups ? g : minGroups;
  }

  // P1: y-window sums of S_o for the batch's offsets -> V_b(x', y, z').
  KOKKOS_FUNCTION void passY(member_type const& team, float* V, int x0, int y0, int z0, int ox,
                             int oy0, int oz, int nb) const {
    constexpr int BM = BoxSumShape<Dim, PR>::BMAX;
    const int r = pb.r;
    const int rz = Dim == 3 ? r : 0;
    const int nxp = tx + 2 * r;
    const int nseg = ty / K1;
    const int ng = p1Groups(nb);
    const int bPer = (nb + ng - 1) / ng;
    const std::size_t bs = bStride();
    const std::size_t nxy = static_cast<std::size_t>(pb.nx) * pb.ny;
    const float* data = in.data();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nxp * planes * nseg * ng), [&](const int item) {
      int rest = dXp.div(item);
      const int xp = item - rest * nxp;
      int next = dPlanes.div(rest);
      const int zp = rest - next * planes;
      rest = next;
      next = dSeg.div(rest);
      const int seg = rest - next * nseg;
      const int g = next;
      const int bBegin = g * bPer;
      const int nbg = (bBegin + bPer < nb ? bBegin + bPer : nb) - bBegin;
      if (nbg <= 0) return;
      const int gx = x0 - r + xp, gz = z0 - rz + zp;
      const float* cCol = data + clampIndex(gz, pb.nz) * nxy + clampIndex(gx, pb.nx);
      const float* sCol = data + clampIndex(gz + oz, pb.nz) * nxy + clampIndex(gx + ox, pb.nx);
      const int ys = y0 + seg * K1 - r;  // first y of the window
      float* dst = V + bBegin * bs + (static_cast<std::size_t>(zp) * ty + seg * K1) * pitch + xp;
      if constexpr (PR > 0) {
        float c[W1], s[W1 + BM - 1];
        loadRun(cCol, ys, pb.ny, pb.nx, c);
        loadRun(sCol, ys + oy0 + bBegin, pb.ny, pb.nx, s);
        KORTEX_UNROLL
        for (int b = 0; b < BM; ++b) {
          if (b < nbg) {
            float S[W1], h[K1];
            KORTEX_UNROLL
            for (int i = 0; i < W1; ++i) S[i] = squaredDifference(c[i], s[b + i]);
            windowSums<W1, W>(S, h);
            KORTEX_UNROLL
            for (int k = 0; k < K1; ++k) dst[k * pitch] = h[k];
            dst += bs;
          }
        }
      } else {
        for (int b = 0; b < nbg; ++b, dst += bs) {
          const int oy = oy0 + bBegin + b;
          float h = 0.0f;
          for (int dy = 0; dy <= 2 * r; ++dy) {
            const int yy = ys + dy;
            h += squaredDifference(cCol[static_cast<std::ptrdiff_t>(clampIndex(yy, pb.ny)) * pb.nx],
                                   sCol[static_cast<std::ptrdiff_t>(clampIndex(yy + oy, pb.ny)) * pb.nx]);
          }
          dst[0] = h;
        }
      }
    });
  }

  // P2: x-window sums of every row of V, in place (row i <- sum of row[i .. i + 2r]).
  KOKKOS_FUNCTION void passX(member_type const& team, float* V, int nb) const {
    const int r = pb.r;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, ty * planes * nb), [&](const int item) {
      float* row = V + static_cast<std::size_t>(item) * pitch;  // rows are consecutive: (b, z', y)
      if constexpr (PR > 0) {
        windowSumsInPlace<W>(row, tx);
      } else {
        for (int x = 0; x < tx; ++x) {  // reads ahead of the write: in place is safe
          float h = 0.0f;
          for (int j = 0; j <= 2 * r; ++j) h += row[x + j];
          row[x] = h;
        }
      }
    });
  }

  // P3: z-window sums -> D, weights, weighted samples, accumulators. The batch's terms are
  // summed in float registers (centred: w * (I(x+o) - I(x))), then added to the double totals in
  // scratch (detail/NlmCommon.hpp: accumulation precision).
  KOKKOS_FUNCTION void passZ(member_type const& team, const float* V, double* accW, double* accWI,
                             int x0, int y0, int z0, int ox, int oy0, int oz, int nb) const {
    const int r = pb.r;
    const std::size_t bs = bStride();
    const std::size_t planeStride = static_cast<std::size_t>(ty) * pitch;
    const std::size_t nxy = static_cast<std::size_t>(pb.nx) * pb.ny;
    const int nzs = tz / K3;
    const float* data = in.data();
    // Offset index of o = 0 inside this batch, or -1.
    const int bCentre = (ox == 0 && oz == 0 && oy0 <= 0 && -oy0 < nb) ? -oy0 : -1;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tx * ty * nzs), [&](const int item) {
      const int rest = dTx.div(item);
      const int x = item - rest * tx;
      const int zs = dTy.div(rest);
      const int y = rest - zs * ty;
      const int gx = x0 + x, gy = y0 + y, gz0 = z0 + zs * K3;
      if (gx >= pb.nx || gy >= pb.ny || gz0 >= pb.nz) return;
      float pW[K3], pWI[K3], centre[K3];
      const float* wCol[K3];  // column of the weighted samples I(c(x + o)) of output k
      const int wx = clampIndex(gx + ox, pb.nx);
      KORTEX_UNROLL
      for (int k = 0; k < K3; ++k) {
        pW[k] = 0.0f;
        pWI[k] = 0.0f;
        const int gz = gz0 + k < pb.nz ? gz0 + k : pb.nz - 1;
        centre[k] = data[gz * nxy + static_cast<std::size_t>(gy) * pb.nx + gx];
        wCol[k] = data + clampIndex(gz0 + k + oz, pb.nz) * nxy + wx;
      }
      const bool yInside = gy + oy0 >= 0 && gy + oy0 + nb <= pb.ny;
      const float* col = V + (static_cast<std::size_t>(zs) * K3 * ty + y) * pitch + x;
      for (int b = 0; b < nb; ++b, col += bs) {
        const int wy = yInside ? gy + oy0 + b : clampIndex(gy + oy0 + b, pb.ny);
        const std::ptrdiff_t wOff = static_cast<std::ptrdiff_t>(wy) * pb.nx;
        float D[K3];
        if constexpr (Dim == 2) {
          D[0] = col[0];
        } else if constexpr (PR > 0) {
          float v[W3];
          KORTEX_UNROLL
          for (int i = 0; i < W3; ++i) v[i] = col[i * planeStride];
          windowSums<W3, W>(v, D);
        } else {
          float h = 0.0f;
          for (int j = 0; j <= 2 * r; ++j) h += col[j * planeStride];
          D[0] = h;
        }
        KORTEX_UNROLL
        for (int k = 0; k < K3; ++k) {
          const float w = b == bCentre ? 1.0f : nlmWeight(D[k], pb.log2Coefficient);
          pW[k] += w;
          pWI[k] += w * (wCol[k][wOff] - centre[k]);
        }
      }
      const std::size_t a0 = (static_cast<std::size_t>(zs) * K3 * ty + y) * tx + x;
      const std::size_t aStride = static_cast<std::size_t>(tx) * ty;
      KORTEX_UNROLL
      for (int k = 0; k < K3; ++k) {
        if (gz0 + k < pb.nz) {
          accW[a0 + k * aStride] += static_cast<double>(pW[k]);
          accWI[a0 + k * aStride] += static_cast<double>(pWI[k]);
        }
      }
    });
  }

  KOKKOS_FUNCTION void operator()(member_type const& team) const {
    acc_view wView(team.team_scratch(0), accSize());
    acc_view wiView(team.team_scratch(0), accSize());
    scratch_view vView(team.team_scratch(0), vSize());
    double* accW = wView.data();
    double* accWI = wiView.data();
    float* V = vView.data();

    int t = team.league_rank();
    const int x0 = (t % tilesX) * tx;
    t /= tilesX;
    const int y0 = (t % tilesY) * ty;
    const int z0 = (t / tilesY) * tz;

    const int n = tx * ty * tz;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) {
      accW[i] = 0.0;
      accWI[i] = 0.0;
    });
    // (ordered before the first P3 by the barrier after P1)

    const int R = pb.R, Rz = Dim == 3 ? pb.R : 0;
    for (int oz = -Rz; oz <= Rz; ++oz)
      for (int ox = -R; ox <= R; ++ox)
        for (int oy0 = -R; oy0 <= R; oy0 += batch) {
          const int nb = R - oy0 + 1 < batch ? R - oy0 + 1 : batch;
          passY(team, V, x0, y0, z0, ox, oy0, oz, nb);
          team.team_barrier();
          if (pb.r > 0) {
            passX(team, V, nb);
            team.team_barrier();
          }
          passZ(team, V, accW, accWI, x0, y0, z0, ox, oy0, oz, nb);
          team.team_barrier();
        }

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) {
      const int x = x0 + i % tx, y = y0 + (i / tx) % ty, z = z0 + i / (tx * ty);
      if (x < pb.nx && y < pb.ny && z < pb.nz)
        out(z, y, x) = nlmNormalise(in(z, y, x), accW[i], accWI[i]);
    });
  }
};

// Scratch bytes of a BoxSum launch.
template <class ExecSpace>
std::size_t boxSumScratchBytes(int tx, int ty, int tz, int batch, int r, int rz) {
  const std::size_t pitch = static_cast<std::size_t>((tx + 2 * r) | 1);
  const std::size_t v = static_cast<std::size_t>(batch) * (tz + 2 * rz) * ty * pitch;
  const std::size_t acc = static_cast<std::size_t>(tx) * ty * tz;
  using AccView = Kokkos::View<double*, typename ExecSpace::scratch_memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return 2 * AccView::shmem_size(acc) + scratchFloatBytes<ExecSpace>(v);
}

// Picks tile and batch: the first tile of a preference list that fits the scratch limit with
// a batch of at least min(4, 2R+1) offsets (the totals are updated once per batch), then the
// largest batch that fits, balanced over the 2R+1 values of o_y. Explicit fields of `req` are
// kept (benchmarks and tests use them). The 3D list starts at 16x4x16, which fits only 3 offsets
// per batch on CUDA, so 16x4x8 with a batch of 6 runs there: measured on H200 for 256^3, r = 2,
// R = 5: 16x4x8/6 80.1 ms, 16x4x16/3 104 ms, 32x4x4/8 86.9 ms, 16x4x4/11 96.9 ms, 8x4x8/11
// 98.8 ms, 8x8x8/6 102 ms, 32x4x8/4 110 ms; 128 threads per team (256: 90.8 ms).
template <int Dim, int PR, class ExecSpace>
BoxSumConfig chooseBoxSumConfig(Problem const& pb, std::size_t maxBytes, BoxSumConfig req) {
  using Shape = BoxSumShape<Dim, PR>;
  const int nOff = 2 * pb.R + 1;
  std::vector<std::array<int, 3>> tiles;
  if (req.tx > 0 && req.ty > 0 && req.tz > 0) {
    tiles.push_back({req.tx, req.ty, req.tz});
  } else if (Dim == 2) {
    tiles = {{32, 8, 1}, {16, 8, 1}, {8, 8, 1}, {4, 8, 1}, {1, 8, 1}};
  } else {
    tiles = {{16, 4, 16}, {16, 4, 8}, {8, 4, 8}, {8, 4, 4}, {4, 4, 4}, {1, 4, 4}};
  }
  for (auto& t : tiles) {  // legal shapes: multiples of the compile-time strips
    t[1] = std::max(Shape::K1, t[1] / Shape::K1 * Shape::K1);
    t[2] = Dim == 2 ? 1 : std::max(Shape::K3, t[2] / Shape::K3 * Shape::K3);
  }
  const int wantBatch = req.batch > 0 ? std::min(req.batch, nOff) : std::min(4, nOff);
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    auto const& t = tiles[i];
    int maxBatch = 0;
    while (maxBatch < nOff &&
           boxSumScratchBytes<ExecSpace>(t[0], t[1], t[2], maxBatch + 1, pb.r, pb.rz) <= maxBytes)
      ++maxBatch;
    const bool last = i + 1 == tiles.size();
    if (maxBatch >= wantBatch || (last && maxBatch >= 1)) {
      BoxSumConfig c;
      c.tx = t[0];
      c.ty = t[1];
      c.tz = t[2];
      int b = req.batch > 0 ? std::min(req.batch, maxBatch) : maxBatch;
      const int nBatches = ceilDiv(nOff, b);
      c.batch = ceilDiv(nOff, nBatches);
      c.teamSize = req.teamSize;
      return c;
    }
  }
  throw Unsupported("NLM BoxSum: patch radius " + std::to_string(pb.r) +
                    " does not fit this backend's team scratch (" + std::to_string(maxBytes) +
                    " bytes) even with a minimal tile");
}

template <int Dim, int PR, class ExecSpace>
void launchBoxSumR(ExecSpace const& exec, InputView<typename ExecSpace::memory_space> in,
                   ImageView<typename ExecSpace::memory_space> out, Problem const& pb,
                   BoxSumConfig req) {
  using Kernel = BoxSumKernel<Dim, PR, ExecSpace>;
  const std::size_t maxBytes = kx::scratchSizeMax<Kokkos::TeamPolicy<ExecSpace>>(0);
  const BoxSumConfig c = chooseBoxSumConfig<Dim, PR, ExecSpace>(pb, maxBytes, req);

  Kernel k{in,
           out,
           pb,
           c.tx,
           c.ty,
           c.tz,
           c.batch,
           ceilDiv(pb.nx, c.tx),
           ceilDiv(pb.ny, c.ty),
           (c.tx + 2 * pb.r) | 1,
           c.tz + 2 * pb.rz,
           1,
           FastDivisor(c.tx + 2 * pb.r),
           FastDivisor(c.tz + 2 * pb.rz),
           FastDivisor(c.ty / Kernel::K1),
           FastDivisor(c.tx),
           FastDivisor(c.ty)};
  const int league = k.tilesX * k.tilesY * ceilDiv(pb.nz, c.tz);
  const std::size_t bytes = boxSumScratchBytes<ExecSpace>(c.tx, c.ty, c.tz, c.batch, pb.r, pb.rz);

  auto policy = Kokkos::TeamPolicy<ExecSpace>(exec, league, Kokkos::AUTO)
                    .set_scratch_size(0, Kokkos::PerTeam(bytes));
  // Threads per team: one per P3 item (TX*TY*TZ/K3: 128 for the 3D default), at most 256,
  // capped by the backend's recommendation (Kokkos 3.4 Serial answers 1).
  const int p3Items = c.tx * c.ty * c.tz / Kernel::K3;
  const int preferred = c.teamSize > 0 ? c.teamSize : std::min(256, std::max(32, p3Items));
  const int teamSize = chooseTeamSize(policy, k, preferred);
  // P1 has (TX + 2r)(TZ + 2r_z)(TY / K1) columns; split the batch's offsets over groups of items
  // until the team has work for every thread.
  const int p1Items = (c.tx + 2 * pb.r) * (c.tz + 2 * pb.rz) * (c.ty / Kernel::K1);
  k.groups = std::max(1, std::min(c.batch, teamSize / std::max(1, p1Items)));
  if (static_cast<long long>(p1Items) * c.batch >= kFastDivisorLimit ||
      static_cast<long long>(c.tx) * c.ty * c.tz >= kFastDivisorLimit)
    throw Unsupported("NLM BoxSum: tile too large");  // unreachable with scratch-sized tiles

  auto launchPolicy = Kokkos::TeamPolicy<ExecSpace>(exec, league, teamSize)
                          .set_scratch_size(0, Kokkos::PerTeam(bytes));
  Kokkos::parallel_for("kortex::Nlm::BoxSum", launchPolicy, k);
}

// ---------------------------------------------------------------------------------------------
// 2D specialisation (r = 1, 2, 3). In 2D the whole input apron of a tile, (TX + 2(R + r)) x
// (TY + 2(R + r)) samples, fits in team scratch next to the sums, so the kernel loads it once
// (clamp rule applied at load) and then runs two passes per batch of B consecutive o_x at fixed
// o_y, with no global memory access at all:
//   P1 (x sums): one item per row of the tile grown by r in y and per segment of L1 = 8 outputs
//      along x; the centre row c[L1 + 2r] and the shifted row s[L1 + 2r + B - 1] come from the
//      apron at compile-time offsets, offset b uses s[b .. b + L1 + 2r); writes H_b(x, y').
//   P2 (y sums, weights): one item per column x and segment of K2 = 4 outputs along y: window sums
//      of H_b give D, then the weights, the weighted samples (apron) and the sums.
// Scratch: 2 x TX x TY double totals + apron + B x (TY + 2r) x pitch floats.
template <int PR>
struct BoxSum2DShape {
  static constexpr int L1 = 8;    // P1 outputs per item along x
  static constexpr int K2 = 4;    // P2 outputs per item along y
  static constexpr int BMAX = 8;  // offsets per P1 item (unrolled)
};

template <class ExecSpace>
std::size_t boxSum2DScratchBytes(int tx, int ty, int batch, int r, int R) {
  using AccView = Kokkos::View<double*, typename ExecSpace::scratch_memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const int h = R + r;
  const std::size_t apron =
      static_cast<std::size_t>(ty + 2 * h) * static_cast<std::size_t>((tx + 2 * h) | 1) + 16;
  const std::size_t hx = static_cast<std::size_t>(batch) * (ty + 2 * r) * static_cast<std::size_t>(tx | 1);
  return 2 * AccView::shmem_size(static_cast<std::size_t>(tx) * ty) + scratchFloatBytes<ExecSpace>(apron) +
         scratchFloatBytes<ExecSpace>(hx);
}

template <int PR, class ExecSpace>
struct BoxSum2DKernel {
  using memory_space = typename ExecSpace::memory_space;
  using policy_type = Kokkos::TeamPolicy<ExecSpace>;
  using member_type = typename policy_type::member_type;
  using scratch_view = Kokkos::View<float*, typename ExecSpace::scratch_memory_space,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using acc_view = Kokkos::View<double*, typename ExecSpace::scratch_memory_space,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr int L1 = BoxSum2DShape<PR>::L1;
  static constexpr int K2 = BoxSum2DShape<PR>::K2;
  static constexpr int BM = BoxSum2DShape<PR>::BMAX;
  static constexpr int W = 2 * PR + 1;
  static constexpr int W1 = L1 + 2 * PR;
  static constexpr int W2 = K2 + 2 * PR;

  InputView<memory_space> in;
  ImageView<memory_space> out;
  Problem pb;
  int tx, ty, batch, tilesX;
  int halo;    // R + r
  int pitchA;  // apron row pitch (odd), rows: ty + 2 halo
  int pitchH;  // H row pitch (odd), rows: ty + 2r per offset
  int groups;  // P1 items per row segment (offset groups)
  FastDivisor dSeg, dRows, dTx;

  KOKKOS_INLINE_FUNCTION std::size_t accSize() const { return static_cast<std::size_t>(tx) * ty; }
  KOKKOS_INLINE_FUNCTION std::size_t apronSize() const {
    return static_cast<std::size_t>(ty + 2 * halo) * pitchA + 16;  // + slack: P1 over-reads a row end
  }
  KOKKOS_INLINE_FUNCTION int hStride() const { return (ty + 2 * pb.r) * pitchH; }
  KOKKOS_INLINE_FUNCTION std::size_t hSize() const { return static_cast<std::size_t>(batch) * hStride(); }

  KOKKOS_INLINE_FUNCTION int p1Groups(int nb) const {
    const int minGroups = (nb + BM - 1) / BM;
    const int g = groups < nb ? groups : nb;
    return g > minGroups ? g : minGroups;
  }

  // P1: x-window sums of S_o for the batch's offsets (o_x = ox0 .. ox0 + nb - 1) -> H_b.
  KOKKOS_FUNCTION void passX(member_type const& team, const float* A, float* H, int oy, int ox0,
                             int nb) const {
    const int r = PR, R = pb.R;
    const int nseg = tx / L1;
    const int rows = ty + 2 * r;
    const int ng = p1Groups(nb);
    const int bPer = (nb + ng - 1) / ng;
    const int hs = hStride();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nseg * rows * ng), [&](const int item) {
      int rest = dSeg.div(item);
      const int seg = item - rest * nseg;
      const int g = dRows.div(rest);
      const int j = rest - g * rows;
      const int bBegin = g * bPer;
      const int nbg = (bBegin + bPer < nb ? bBegin + bPer : nb) - bBegin;
      if (nbg <= 0) return;
      // Apron column of the window start x0 + seg*L1 - r is seg*L1 + R; its row for y0 - r + j is j + R.
      const float* cRow = A + (j + R) * pitchA + seg * L1 + R;
      const float* sRow = A + (j + R + oy) * pitchA + seg * L1 + R + ox0 + bBegin;
      float* dst = H + bBegin * hs + j * pitchH + seg * L1;
      float c[W1], s[W1 + BM - 1];
      KORTEX_UNROLL
      for (int i = 0; i < W1; ++i) c[i] = cRow[i];
      KORTEX_UNROLL
      for (int i = 0; i < W1 + BM - 1; ++i) s[i] = sRow[i];
      KORTEX_UNROLL
      for (int b = 0; b < BM; ++b) {
        if (b < nbg) {
          float S[W1], h[L1];
          KORTEX_UNROLL
          for (int i = 0; i < W1; ++i) S[i] = squaredDifference(c[i], s[b + i]);
          windowSums<W1, W>(S, h);
          KORTEX_UNROLL
          for (int k = 0; k < L1; ++k) dst[k] = h[k];
          dst += hs;
        }
      }
    });
  }

  // P2: y-window sums of H_b -> D, weights, weighted samples (apron), sums.
  KOKKOS_FUNCTION void passY(member_type const& team, const float* A, const float* H, double* accW,
                             double* accWI, int x0, int y0, int oy, int ox0, int nb) const {
    const int hs = hStride();
    const int h = halo;
    const int bCentre = (oy == 0 && ox0 <= 0 && -ox0 < nb) ? -ox0 : -1;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tx * (ty / K2)), [&](const int item) {
      const int yseg = dTx.div(item);
      const int x = item - yseg * tx;
      const int ly0 = yseg * K2;
      if (x0 + x >= pb.nx || y0 + ly0 >= pb.ny) return;
      float pW[K2], pWI[K2], centre[K2];
      const float* cp = A + (ly0 + h) * pitchA + x + h;
      KORTEX_UNROLL
      for (int k = 0; k < K2; ++k) {
        pW[k] = 0.0f;
        pWI[k] = 0.0f;
        centre[k] = cp[k * pitchA];
      }
      const float* hcol = H + ly0 * pitchH + x;  // H rows ly0 .. ly0 + K2 + 2r
      const float* wp = cp + oy * pitchA + ox0;  // weighted sample of output k, offset b: wp[k*pitchA + b]
      for (int b = 0; b < nb; ++b, hcol += hs) {
        float v[W2], D[K2];
        KORTEX_UNROLL
        for (int i = 0; i < W2; ++i) v[i] = hcol[i * pitchH];
        windowSums<W2, W>(v, D);
        KORTEX_UNROLL
        for (int k = 0; k < K2; ++k) {
          const float w = b == bCentre ? 1.0f : nlmWeight(D[k], pb.log2Coefficient);
          pW[k] += w;
          pWI[k] += w * (wp[k * pitchA + b] - centre[k]);
        }
      }
      KORTEX_UNROLL
      for (int k = 0; k < K2; ++k) {
        if (y0 + ly0 + k < pb.ny) {
          accW[(ly0 + k) * tx + x] += static_cast<double>(pW[k]);
          accWI[(ly0 + k) * tx + x] += static_cast<double>(pWI[k]);
        }
      }
    });
  }

  KOKKOS_FUNCTION void operator()(member_type const& team) const {
    acc_view wView(team.team_scratch(0), accSize());
    acc_view wiView(team.team_scratch(0), accSize());
    scratch_view aView(team.team_scratch(0), apronSize());
    scratch_view hView(team.team_scratch(0), hSize());
    double* accW = wView.data();
    double* accWI = wiView.data();
    float* A = aView.data();
    float* H = hView.data();

    const int t = team.league_rank();
    const int tileY = t / tilesX;
    const int x0 = (t - tileY * tilesX) * tx;
    const int y0 = tileY * ty;
    const int ax = tx + 2 * halo, ay = ty + 2 * halo;

    // Apron with the clamp rule applied once per sample; zeroed totals.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, ax * ay), [&](const int i) {
      const int iy = i / ax, ix = i - iy * ax;
      A[iy * pitchA + ix] = in(0, clampIndex(y0 - halo + iy, pb.ny), clampIndex(x0 - halo + ix, pb.nx));
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tx * ty), [&](const int i) {
      accW[i] = 0.0;
      accWI[i] = 0.0;
    });
    team.team_barrier();

    const int R = pb.R;
    for (int oy = -R; oy <= R; ++oy)
      for (int ox0 = -R; ox0 <= R; ox0 += batch) {
        const int nb = R - ox0 + 1 < batch ? R - ox0 + 1 : batch;
        passX(team, A, H, oy, ox0, nb);
        team.team_barrier();
        passY(team, A, H, accW, accWI, x0, y0, oy, ox0, nb);
        team.team_barrier();
      }

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tx * ty), [&](const int i) {
      const int ly = i / tx, lx = i - ly * tx;
      if (x0 + lx < pb.nx && y0 + ly < pb.ny)
        out(0, y0 + ly, x0 + lx) =
            nlmNormalise(A[(ly + halo) * pitchA + lx + halo], accW[i], accWI[i]);
    });
  }
};

// Tile and batch for the 2D kernel; false if no tile fits (huge R: the general kernel runs).
template <int PR, class ExecSpace>
bool chooseBoxSum2DConfig(Problem const& pb, std::size_t maxBytes, BoxSumConfig req, BoxSumConfig& c) {
  using Shape = BoxSum2DShape<PR>;
  const int nOff = 2 * pb.R + 1;
  std::vector<std::array<int, 2>> tiles;
  if (req.tx > 0 && req.ty > 0)
    tiles.push_back({std::max(Shape::L1, req.tx / Shape::L1 * Shape::L1),
                     std::max(Shape::K2, req.ty / Shape::K2 * Shape::K2)});
  else  // measured on H200, 1024^2, r = 3, R = 8: 32x16 (batch 6) 0.63 ms, 32x8 0.69 ms,
        // 64x8 0.75 ms, 16x16 0.80 ms
    tiles = {{32, 16}, {32, 8}, {16, 8}, {8, 8}, {8, 4}};
  const int wantBatch = req.batch > 0 ? std::min(req.batch, nOff) : std::min(4, nOff);
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    auto const& t = tiles[i];
    int maxBatch = 0;
    while (maxBatch < nOff &&
           boxSum2DScratchBytes<ExecSpace>(t[0], t[1], maxBatch + 1, pb.r, pb.R) <= maxBytes)
      ++maxBatch;
    if (maxBatch >= wantBatch || (i + 1 == tiles.size() && maxBatch >= 1)) {
      c.tx = t[0];
      c.ty = t[1];
      c.tz = 1;
      const int b = req.batch > 0 ? std::min(req.batch, maxBatch) : maxBatch;
      c.batch = ceilDiv(nOff, ceilDiv(nOff, b));
      c.teamSize = req.teamSize;
      return true;
    }
  }
  return false;
}

template <int PR, class ExecSpace>
bool launchBoxSum2D(ExecSpace const& exec, InputView<typename ExecSpace::memory_space> in,
                    ImageView<typename ExecSpace::memory_space> out, Problem const& pb,
                    BoxSumConfig req) {
  using Kernel = BoxSum2DKernel<PR, ExecSpace>;
  using Shape = BoxSum2DShape<PR>;
  const std::size_t maxBytes = kx::scratchSizeMax<Kokkos::TeamPolicy<ExecSpace>>(0);
  BoxSumConfig c;
  if (!chooseBoxSum2DConfig<PR, ExecSpace>(pb, maxBytes, req, c)) return false;
  const int halo = pb.R + pb.r;
  Kernel k{in,
           out,
           pb,
           c.tx,
           c.ty,
           c.batch,
           ceilDiv(pb.nx, c.tx),
           halo,
           (c.tx + 2 * halo) | 1,
           c.tx | 1,
           1,
           FastDivisor(c.tx / Shape::L1),
           FastDivisor(c.ty + 2 * pb.r),
           FastDivisor(c.tx)};
  const int league = k.tilesX * ceilDiv(pb.ny, c.ty);
  const std::size_t bytes = boxSum2DScratchBytes<ExecSpace>(c.tx, c.ty, c.batch, pb.r, pb.R);
  auto policy = Kokkos::TeamPolicy<ExecSpace>(exec, league, Kokkos::AUTO)
                    .set_scratch_size(0, Kokkos::PerTeam(bytes));
  // Threads: one per P2 item (TX * TY / K2: 128 for 32x16; 256 threads measured 0.77 ms vs
  // 0.63 ms), at most 256, capped by the backend.
  const int p2Items = c.tx * c.ty / Shape::K2;
  const int preferred = c.teamSize > 0 ? c.teamSize : std::min(256, std::max(32, p2Items));
  const int teamSize = chooseTeamSize(policy, k, preferred);
  const int p1Items = (c.ty + 2 * pb.r) * (c.tx / Shape::L1);
  k.groups = std::max(1, std::min(c.batch, teamSize / std::max(1, p1Items)));
  if (static_cast<long long>(p1Items) * c.batch >= kFastDivisorLimit ||
      static_cast<long long>(c.tx) * c.ty >= kFastDivisorLimit)
    throw Unsupported("NLM BoxSum: tile too large");  // unreachable with scratch-sized tiles
  auto launchPolicy = Kokkos::TeamPolicy<ExecSpace>(exec, league, teamSize)
                          .set_scratch_size(0, Kokkos::PerTeam(bytes));
  Kokkos::parallel_for("kortex::Nlm::BoxSum2D", launchPolicy, k);
  return true;
}

template <int Dim, class ExecSpace>
void launchBoxSum(ExecSpace const& exec, InputView<typename ExecSpace::memory_space> in,
                  ImageView<typename ExecSpace::memory_space> out, Problem const& pb,
                  BoxSumConfig req = {}) {
  if constexpr (Dim == 2) {
    bool done = false;
    switch (pb.r) {
      case 1: done = launchBoxSum2D<1>(exec, in, out, pb, req); break;
      case 2: done = launchBoxSum2D<2>(exec, in, out, pb, req); break;
      case 3: done = launchBoxSum2D<3>(exec, in, out, pb, req); break;
      default: break;
    }
    // (No tile fits only for search radii far beyond kMaxRadius; the runtime-radius kernel has
    // no apron and always fits.)
    if (!done) launchBoxSumR<2, 0>(exec, in, out, pb, req);
  } else {
    switch (pb.r) {
      case 1: launchBoxSumR<Dim, 1>(exec, in, out, pb, req); break;
      case 2: launchBoxSumR<Dim, 2>(exec, in, out, pb, req); break;
      case 3: launchBoxSumR<Dim, 3>(exec, in, out, pb, req); break;
      default: launchBoxSumR<Dim, 0>(exec, in, out, pb, req); break;
    }
  }
}

}  // namespace kortex::gpu::nlm_detail
