// Kernels of the Kokkos bilateral filter (entry point: gpu/bilateral/Bilateral.hpp; definition:
// core/Bilateral.hpp). Internal header: benchmarks include it to explore tile shapes through
// scratchTiled(..., TileShape). No Eigen, no OpenMP pragmas, no VTK here.
//
// Naive        RangePolicy over a 1D voxel index decomposed with x fastest (consecutive threads
//              read consecutive addresses); every tap read from global memory through the
//              RandomAccess (read-only cache) path with the clamp rule; the tap weight is
//              bilateralWeight (one exp per factor).
// ScratchTiled TeamPolicy, one team per output tile, team size Kokkos::AUTO (LaunchBounds<256>).
//              Per team:
//                1. the apron (tile + 2r per filtered axis) is loaded cooperatively into level-0
//                   scratch, clamp rule applied during the load (TeamThreadRange over the flat
//                   apron index, x fastest: coalesced global reads, conflict-free stores). 3D
//                   tiles either hold the whole apron or stream it one input plane at a time
//                   (TileShape::streamZ; scratch then no longer grows with r^3);
//                2. the spatial LUT, one factor per axis group, in the same scratch block:
//                   lutX[i]   = bilateralSpatialWeight((i-r)^2)          (2r+1 entries)
//                   lutRow[m] = bilateralSpatialWeight(m), m = dz^2+dy^2  (r^2+1 / 2r^2+1)
//                   so the spatial weight of tap (dz,dy,dx) is lutRow[dz^2+dy^2] * lutX[dx+r]
//                   (exp(a)exp(b) for exp(a+b): within 2 ulp of bilateralSpatialWeight);
//                3. team_barrier(), then TeamThreadRange over work items: one work item is one x
//                   column of P consecutive y rows (P = TileShape::perThread). Consecutive work
//                   items are consecutive x: a warp reads 32 consecutive scratch words (no bank
//                   conflicts) and writes coalesced. For each window row (dz, dy) an output
//                   accumulates in float registers
//                       S = sum_dx e * (lutX * v),   W = sum_dx e * lutX,   e = range factor
//                   (two FMAs per tap) and then sum += lutRow * S, wsum += lutRow * W.
//                   The range factor is bilateralRangeWeight per tap: one exp2Flush, a single
//                   MUFU.EX2 on CUDA (core/FastMath.hpp).
//              P == 4 with radius 1..kMaxFastRadius runs a compile-time-radius kernel: lutX lives
//              in registers, and each apron row is read from scratch once per work item and
//              shared by the P outputs whose windows contain it (together with lutX * v).
//              Everything else runs the same arithmetic with run-time loops; all paths give the
//              same results (same operations, same order; only FMA contraction may differ).
//              team_rank() is never used as a tile index: any team size the backend picks
//              (1 on Kokkos 3.4 Serial) covers the tile through the TeamThreadRange loops.
// Cost at 2D r = 8 on an H100: ~15 instructions per tap (13 of them the exact range factor
// and the two FMAs), issue-bound at ~82% issue-slot utilisation (Nsight Compute).
#pragma once

#include <Kokkos_Core.hpp>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/Bilateral.hpp"
#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Image.hpp"
#include "gpu/detail/Common.hpp"

namespace kortex::gpu::bilateral_detail {

// Upper bound on the team size Kokkos::AUTO may pick (LaunchBounds of the team kernel).
inline constexpr int kMaxTeamThreads = 256;
// Radii with a compile-time-radius ScratchTiled kernel for perThread 4 (larger radii and other
// perThread values use run-time loops).
inline constexpr int kMaxFastRadius = 8;

// Output tile of one team, in voxels, and outputs per work item along y (1, 2, 4 or 8; must
// divide y). 2D tiles have z == 1. 3D only: streamZ = false keeps the whole apron
// (x+2r)(y+2r)(z+2r) in scratch; streamZ = true streams it one input plane (x+2r)(y+2r) at a
// time through two scratch buffers (one barrier per plane), with the per-output sums kept in
// scratch between planes: scratch no longer grows with r^3, so large radii keep large tiles.
struct TileShape {
  int x = 32;
  int y = 16;
  int z = 1;
  int perThread = 4;
  bool streamZ = false;
};

inline std::string describe(TileShape const& t) {
  return std::to_string(t.x) + "x" + std::to_string(t.y) + "x" + std::to_string(t.z) + " (" +
         std::to_string(t.perThread) + " outputs/thread" + (t.streamZ ? ", z-streamed)" : ")");
}

// Apron floats held in scratch: the whole apron, or two input planes when z-streamed.
inline std::size_t apronElements(TileShape const& t, int radius, int dim) {
  const std::size_t r2 = 2 * static_cast<std::size_t>(radius);
  const std::size_t planeN =
      (static_cast<std::size_t>(t.x) + r2) * (static_cast<std::size_t>(t.y) + r2);
  if (dim == 2) return planeN;
  return t.streamZ ? 2 * planeN : planeN * (static_cast<std::size_t>(t.z) + r2);
}

// z-streamed 3D only: the tile's centre voxels and a (sum, wsum) pair per output.
inline std::size_t streamElements(TileShape const& t, int dim) {
  if (dim == 2 || !t.streamZ) return 0;
  return 3 * static_cast<std::size_t>(t.x) * static_cast<std::size_t>(t.y) *
         static_cast<std::size_t>(t.z);
}

// lutX (2r+1) followed by lutRow over m = dz^2+dy^2 (2D: r^2+1 entries, 3D: 2r^2+1).
inline std::size_t lutElements(int radius, int dim) {
  const std::size_t r = static_cast<std::size_t>(radius);
  return (2 * r + 1) + (dim == 2 ? r * r + 1 : 2 * r * r + 1);
}

// Level-0 scratch one team requests: all of the above in one block aligned to 16 B (+16 B so
// the aligned allocation always fits).
inline std::size_t scratchBytes(TileShape const& t, int radius, int dim) {
  const std::size_t floats =
      apronElements(t, radius, dim) + streamElements(t, dim) + lutElements(radius, dim);
  return ((floats * sizeof(float) + 15) / 16) * 16 + 16;
}

// Throws InvalidArgument for a tile that cannot be used for images of dimension `dim`.
inline void checkTile(TileShape const& t, int dim) {
  if (t.x < 1 || t.y < 1 || t.z < 1 || t.x > 1024 || t.y > 1024 || t.z > 1024)
    throw InvalidArgument("bilateral: tile " + describe(t) + " must have extents in [1, 1024]");
  if (dim == 2 && (t.z != 1 || t.streamZ))
    throw InvalidArgument("bilateral: a 2D tile must have z == 1 and no z-streaming, got " +
                          describe(t));
  if (t.perThread != 1 && t.perThread != 2 && t.perThread != 4 && t.perThread != 8)
    throw InvalidArgument("bilateral: outputs per thread must be 1, 2, 4 or 8, got " +
                          describe(t));
  if (t.y % t.perThread != 0)
    throw InvalidArgument("bilateral: outputs per thread must divide the tile's y extent, got " +
                          describe(t));
}

// Largest tile derived from `t` whose scratch fits in `maxBytes`: halves z, then y (keeping
// x = 32 for coalescing as long as possible), then x; perThread follows y. Throws Unsupported
// when even a 1x1(x1) tile does not fit.
inline TileShape fitTile(TileShape t, int radius, int dim, std::size_t maxBytes) {
  checkTile(t, dim);
  while (scratchBytes(t, radius, dim) > maxBytes) {
    if (dim == 3 && t.z > 1 && t.z >= t.y) {
      t.z = (t.z + 1) / 2;
    } else if (t.y > 1) {
      t.y = (t.y + 1) / 2;
    } else if (t.x > 1) {
      t.x = (t.x + 1) / 2;
    } else {
      throw Unsupported("bilateral ScratchTiled: radius " + std::to_string(radius) + " in " +
                        std::to_string(dim) + "D needs " +
                        std::to_string(scratchBytes(t, radius, dim)) +
                        " B of team scratch even for a single-voxel tile, more than the " +
                        std::to_string(maxBytes) +
                        " B this execution space offers; use the naive variant");
    }
    while (t.perThread > 1 && t.y % t.perThread != 0) t.perThread /= 2;
  }
  return t;
}

// Default tiles (perThread 4 = the fixed-radius kernels). x = 32: one warp spans one tile row,
// so global loads are coalesced and a warp's scratch reads hit 32 consecutive words.
// Measured on an H100 (median of 21 runs, random image, sigma_r 0.1), 2026-11-22:
//   2D 1024^2 r=8: 32x16 P4 0.174 ms, 32x32 P4 0.174, 64x32 P4 0.176, 32x8 P4 0.199,
//                  32x32 P8 0.194, 32x16 P2 (run-time radius kernel) 0.213; Naive 0.457.
//   2D 512^2 r=8:  32x16 P4 0.0552 ms, 32x32 P4 0.0582, 32x8 P4 0.0593; Naive 0.135.
//   3D 128^3 r=1..3: whole apron 32x8x4 P4 0.072 / 0.198 / 0.456 ms; 32x8x2 0.076 / 0.208 /
//                  0.475; z-streamed 32x16x2 0.088 / 0.219 / 0.485.
//   3D 128^3 r=5:  whole apron (shrunk to 32x4x4) 1.58 ms, z-streamed 32x16x2 1.57.
//   3D 96^3 r=6:   whole apron (shrunk to 32x4x2) 1.30 ms, z-streamed 32x16x2 1.12; Naive 2.88.
//   3D 96^3 r=8:   whole apron (shrunk to 16x1x1 P1) 10.8 ms, z-streamed 32x16x2 2.45; Naive 6.33.
// So 3D keeps the whole apron while 32x8x4 fits the backend's scratch unshrunk (r <= 4 at
// 32-40 KiB) and z-streams 32x16x2 beyond.
// Launch bounds <256,1> (126 registers at 2D r=8, 4 teams of 128 per SM) beat every tighter
// register budget tried (<256,2..3>, <128,5..8>, <64,10>: 0.173-0.214 ms at 2D 1024^2 r=8).
inline TileShape defaultTile(int dim, int radius, std::size_t maxScratchBytes) {
  if (dim == 2) return TileShape{32, 16, 1, 4, false};
  const TileShape whole{32, 8, 4, 4, false};
  if (scratchBytes(whole, radius, 3) <= maxScratchBytes) return whole;
  return TileShape{32, 16, 2, 4, true};
}

// Smaller tiles for small images on wide devices: halves z (3D), then y down to perThread,
// while the image has fewer tiles than concurrency / 1024 (264 on an H100). Measured: 3D 64^3
// r=3 32x8x2 (512 tiles) 0.0759 ms vs 32x8x4 (256) 0.0806; 2D 256^2 r=8 32x4 (512 tiles)
// 0.0263 ms vs 32x16 (128) 0.0264 vs 32x32 (64) 0.0397. Host backends (concurrency <= a few
// hundred) keep the default. Does not change scratch needs beyond the tile it starts from.
inline TileShape adaptTile(TileShape t, Index nx, Index ny, Index nz, int dim, int concurrency) {
  auto tiles = [&](TileShape const& s) {
    return ((nx + s.x - 1) / s.x) * ((ny + s.y - 1) / s.y) * ((nz + s.z - 1) / s.z);
  };
  const Index wanted = static_cast<Index>(concurrency) / 1024;
  while (tiles(t) < wanted) {
    if (dim == 3 && t.z > 1)
      t.z /= 2;
    else if (t.y > t.perThread)
      t.y /= 2;
    else
      break;
  }
  return t;
}

// Extent and index-range checks shared by both variants (parameters are validated where the job
// enters the pipeline; the radius bound here only protects the scratch and window sizing).
template <class InView, class OutView>
int checkInputs(InView const& in, OutView const& out, BilateralParams const& params) {
  checkSameExtents(in, out, "bilateral");
  const Index nz = static_cast<Index>(in.extent(0));
  const Index ny = static_cast<Index>(in.extent(1));
  const Index nx = static_cast<Index>(in.extent(2));
  const Geometry g = Geometry::fromSize(nx, ny, nz);
  requireRadius("bilateral", params.radius, BilateralParams::kMaxRadius);
  if (nx > INT_MAX / 2 || ny > INT_MAX / 2 || nz > INT_MAX / 2)
    throw InvalidArgument("bilateral: image extent too large for 32-bit indexing (" +
                          describe(g) + ")");
  return g.dimension;
}

struct Extents {
  int nx, ny, nz;
};

// ----------------------------------------------------------------------------------------------
// Naive

template <class MemSpace, int Dim>
struct NaiveFunctor {
  using InView = Kokkos::View<const float***, Kokkos::LayoutRight, MemSpace,
                              Kokkos::MemoryTraits<Kokkos::RandomAccess>>;
  InView in;
  ImageView<MemSpace> out;
  BilateralCoeffs coeffs;
  Extents ext;
  int radius;

  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    const int x = static_cast<int>(i % ext.nx);
    const std::int64_t t = i / ext.nx;
    const int y = static_cast<int>(t % ext.ny);
    const int z = static_cast<int>(t / ext.ny);
    const int r = radius;
    const int rz = Dim == 3 ? r : 0;
    const float centre = in(z, y, x);
    float sum = 0.0f;
    float wsum = 0.0f;
    // Window rows are summed separately, then added: float error grows with the row length
    // and the number of rows instead of the window size.
    for (int dz = -rz; dz <= rz; ++dz) {
      const int zz = clampIndex(z + dz, ext.nz);
      for (int dy = -r; dy <= r; ++dy) {
        const int yy = clampIndex(y + dy, ext.ny);
        const int dzy2 = dz * dz + dy * dy;
        float rowSum = 0.0f;
        float rowWsum = 0.0f;
        for (int dx = -r; dx <= r; ++dx) {
          const float v = in(zz, yy, clampIndex(x + dx, ext.nx));
          const float w = bilateralWeight(dzy2 + dx * dx, v - centre, coeffs);
          rowSum += w * v;
          rowWsum += w;
        }
        sum += rowSum;
        wsum += rowWsum;
      }
    }
    out(z, y, x) = sum / wsum;
  }
};

template <class ExecSpace>
void naive(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
           ImageView<typename ExecSpace::memory_space> out, BilateralParams const& params) {
  using Mem = typename ExecSpace::memory_space;
  const int dim = checkInputs(in, out, params);
  const Extents ext{static_cast<int>(in.extent(2)), static_cast<int>(in.extent(1)),
                    static_cast<int>(in.extent(0))};
  const std::int64_t n = static_cast<std::int64_t>(in.size());
  Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>> policy(exec, 0, n);
  const BilateralCoeffs c = bilateralCoeffs(params);
  // Closures of 512 B or more are copied to CUDA constant memory under a lock per launch.
  static_assert(sizeof(NaiveFunctor<Mem, 3>) < 512, "keep the kernel closure small");
  if (dim == 2)
    Kokkos::parallel_for("kortex::Bilateral::Naive", policy,
                         NaiveFunctor<Mem, 2>{in, out, c, ext, params.radius});
  else
    Kokkos::parallel_for("kortex::Bilateral::Naive", policy,
                         NaiveFunctor<Mem, 3>{in, out, c, ext, params.radius});
}


// ----------------------------------------------------------------------------------------------
// ScratchTiled

// nvcc would fully unroll loops whose trip count is a template constant; the row and plane
// loops of the fixed-radius kernel stay rolled (KORTEX_NO_UNROLL: their bodies are already
// 17 x P taps at r = 8).

// MaxThreads / MinTeams: CUDA launch bounds (register budget); the defaults are what the
// dispatcher uses, other values are for benchmarks exploring occupancy.
template <class ExecSpace, int MaxThreads = kMaxTeamThreads, int MinTeams = 1>
using TiledPolicy = Kokkos::TeamPolicy<ExecSpace, Kokkos::LaunchBounds<MaxThreads, MinTeams>>;

// Dim: 2 or 3. P: outputs per work item along y. R: compile-time radius, or 0 for run-time
// loops over `radius`. Stream: 3D z-streaming (TileShape::streamZ).
template <class ExecSpace, int Dim, int P, int R, bool Stream>
struct ScratchTiledFunctor {
  using Mem = typename ExecSpace::memory_space;
  using Member = typename TiledPolicy<ExecSpace>::member_type;
  static constexpr int kD = 2 * (R > 0 ? R : 1) + 1;  // fixed-radius window width

  ConstImageView<Mem> in;
  ImageView<Mem> out;
  BilateralCoeffs coeffs;
  Extents ext;
  int radius;
  int tx, ty, tz;      // tile
  int tilesX, tilesY;  // league rank -> tile
  int aw, ah, ad;      // apron extents (ad: planes held at once)
  int lutN;
  int scratchBytes;

  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    const int r = R > 0 ? R : radius;
    const int rz = Dim == 3 ? r : 0;
    const int diam = 2 * r + 1;
    const int league = team.league_rank();
    const int x0 = (league % tilesX) * tx;
    const int yz = league / tilesX;
    const int y0 = (yz % tilesY) * ty;
    const int z0 = (yz / tilesY) * tz;
    const int plane = aw * ah;
    const int tileN = tx * ty * tz;

    float* const scratch =
        static_cast<float*>(team.team_scratch(0).get_shmem_aligned(scratchBytes - 16, 16));
    float* const apron = scratch;                        // ad planes of aw x ah
    float* const centres = apron + plane * ad;           // Stream only: tileN
    float* const acc = centres + (Stream ? tileN : 0);   // Stream only: sums, then wsums
    float* const lutX = acc + (Stream ? 2 * tileN : 0);  // 2r+1
    float* const lutRow = lutX + diam;                   // m = dz^2 + dy^2

    // Spatial factors: lutX[i] for dx = i - r, then lutRow[m] for dz^2 + dy^2 = m.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lutN), [&](const int n) {
      const int d2 = n < diam ? (n - r) * (n - r) : n - diam;
      lutX[n] = bilateralSpatialWeight(d2, coeffs.spatialLog2Coeff);
    });

    const int rowsOfItems = ty / P;
    const int nWork = tx * rowsOfItems * tz;
    const float kR = coeffs.rangeLog2Coeff;

    if (!Stream) {
      // Whole apron, clamp rule applied during the load.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, plane * ad), [&](const int n) {
        const int ax = n % aw;
        const int t = n / aw;
        const int ay = Dim == 2 ? t : t % ah;
        const int az = Dim == 2 ? 0 : t / ah;
        apron[n] = in(clampIndex(z0 + az - rz, ext.nz), clampIndex(y0 + ay - r, ext.ny),
                      clampIndex(x0 + ax - r, ext.nx));
      });
      team.team_barrier();
      // Work item = column lx, rows ly .. ly+P-1, slice lz.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nWork), [&](const int item) {
        const int lx = item % tx;
        const int t = item / tx;
        const int ly = (t % rowsOfItems) * P;
        const int lz = t / rowsOfItems;
        const int x = x0 + lx, y = y0 + ly, z = z0 + lz;
        if (x >= ext.nx || y >= ext.ny || z >= ext.nz) return;
        // Window corner (offset -r,-r,-rz) of output p == 0 in apron coordinates: (lx, ly, lz).
        const float* const win = apron + lz * plane + ly * aw + lx;
        float centre[P], sum[P], wsum[P];
        for (int p = 0; p < P; ++p) {
          centre[p] = win[rz * plane + (p + r) * aw + r];
          sum[p] = 0.0f;
          wsum[p] = 0.0f;
        }
        float gx[kD];
        if (R > 0)
          for (int i = 0; i < kD; ++i) gx[i] = lutX[i];
        KORTEX_NO_UNROLL
        for (int k = 0; k < 2 * rz + 1; ++k) {
          const int dz2 = (k - rz) * (k - rz);
          if (R > 0)
            accumulatePlaneFixed(win + k * plane, dz2, gx, lutRow, kR, centre, sum, wsum);
          else
            accumulatePlaneGeneric(win + k * plane, dz2, r, lutX, lutRow, kR, centre, sum,
                                   wsum);
        }
        for (int p = 0; p < P; ++p)
          if (y + p < ext.ny) out(z, y + p, x) = sum[p] / wsum[p];
      });
      return;
    }

    // z-streamed 3D: centre voxels of the tile and zeroed sums, then input planes
    // z0 - r .. z0 + tz - 1 + r one at a time (double-buffered: one barrier per plane).
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tileN), [&](const int n) {
      const int lx = n % tx;
      const int t = n / tx;
      const int ly = t % ty;
      const int lz = t / ty;
      centres[n] = in(clampIndex(z0 + lz, ext.nz), clampIndex(y0 + ly, ext.ny),
                      clampIndex(x0 + lx, ext.nx));
      acc[n] = 0.0f;
      acc[tileN + n] = 0.0f;
    });
    for (int k = 0; k < tz + 2 * r; ++k) {
      float* const buf = apron + (k & 1) * plane;
      const int zz = clampIndex(z0 - r + k, ext.nz);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, plane), [&](const int n) {
        const int ax = n % aw;
        const int ay = n / aw;
        buf[n] = in(zz, clampIndex(y0 + ay - r, ext.ny), clampIndex(x0 + ax - r, ext.nx));
      });
      // Also orders this plane's sums after the previous plane's (any thread may own an item).
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nWork), [&](const int item) {
        const int lx = item % tx;
        const int t = item / tx;
        const int ly = (t % rowsOfItems) * P;
        const int lz = t / rowsOfItems;
        const int dz = k - r - lz;  // this plane's offset for output slice lz
        if (dz < -r || dz > r) return;
        if (x0 + lx >= ext.nx || y0 + ly >= ext.ny || z0 + lz >= ext.nz) return;
        const int o = (lz * ty + ly) * tx + lx;  // output p at o + p * tx
        float centre[P], sum[P], wsum[P];
        for (int p = 0; p < P; ++p) {
          centre[p] = centres[o + p * tx];
          sum[p] = acc[o + p * tx];
          wsum[p] = acc[tileN + o + p * tx];
        }
        const float* const win = buf + ly * aw + lx;
        if (R > 0) {
          float gx[kD];
          for (int i = 0; i < kD; ++i) gx[i] = lutX[i];
          accumulatePlaneFixed(win, dz * dz, gx, lutRow, kR, centre, sum, wsum);
        } else {
          accumulatePlaneGeneric(win, dz * dz, r, lutX, lutRow, kR, centre, sum, wsum);
        }
        for (int p = 0; p < P; ++p) {
          acc[o + p * tx] = sum[p];
          acc[tileN + o + p * tx] = wsum[p];
        }
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nWork), [&](const int item) {
      const int lx = item % tx;
      const int t = item / tx;
      const int ly = (t % rowsOfItems) * P;
      const int lz = t / rowsOfItems;
      const int x = x0 + lx, y = y0 + ly, z = z0 + lz;
      if (x >= ext.nx || y >= ext.ny || z >= ext.nz) return;
      const int o = (lz * ty + ly) * tx + lx;
      for (int p = 0; p < P; ++p)
        if (y + p < ext.ny) out(z, y + p, x) = acc[o + p * tx] / acc[tileN + o + p * tx];
    });
  }

  // One input plane (dz fixed), run-time radius: window row by window row; output p reads p
  // rows further down. `win`: window corner of output 0 in that plane.
  KOKKOS_INLINE_FUNCTION void accumulatePlaneGeneric(const float* const win, const int dz2,
                                                     const int r, const float* const lutX,
                                                     const float* const lutRow, const float kR,
                                                     const float (&centre)[P], float (&sum)[P],
                                                     float (&wsum)[P]) const {
    const int diam = 2 * r + 1;
    for (int j = 0; j < diam; ++j) {
      const float* const row = win + j * aw;
      float S[P], W[P];
      for (int p = 0; p < P; ++p) S[p] = W[p] = 0.0f;
      for (int i = 0; i < diam; ++i) {
        const float gx = lutX[i];
        for (int p = 0; p < P; ++p) {
          const float v = row[p * aw + i];
          const float gv = gx * v;
          const float e = bilateralRangeWeight(v - centre[p], kR);
          S[p] += e * gv;
          W[p] += e * gx;
        }
      }
      const float g = lutRow[dz2 + (j - r) * (j - r)];
      for (int p = 0; p < P; ++p) {
        sum[p] += g * S[p];
        wsum[p] += g * W[p];
      }
    }
  }

  // One input plane, compile-time radius R, lutX in registers: each apron row (values and
  // lutX * v) is read once and used by every output p whose window contains it (window row
  // dy = jj - p). Same operations in the same order per output as accumulatePlaneGeneric.
  KOKKOS_INLINE_FUNCTION void accumulatePlaneFixed(const float* const win, const int dz2,
                                                   const float (&gx)[kD],
                                                   const float* const lutRow, const float kR,
                                                   const float (&centre)[P], float (&sum)[P],
                                                   float (&wsum)[P]) const {
    constexpr int RR = (kD - 1) / 2;
    const int rows = P + 2 * radius;  // == P + 2R, kept run-time so the loop stays rolled
    KORTEX_NO_UNROLL
    for (int jj = 0; jj < rows; ++jj) {
      const float* const row = win + jj * aw;
      float v[kD], gv[kD];
      for (int i = 0; i < kD; ++i) {
        v[i] = row[i];
        gv[i] = gx[i] * v[i];
      }
      for (int p = 0; p < P; ++p) {
        const int dy = jj - p;  // window row of output p
        if (dy < 0 || dy > 2 * RR) continue;
        float S = 0.0f, W = 0.0f;
        for (int i = 0; i < kD; ++i) {
          const float e = bilateralRangeWeight(v[i] - centre[p], kR);
          S += e * gv[i];
          W += e * gx[i];
        }
        const float g = lutRow[dz2 + (dy - RR) * (dy - RR)];
        sum[p] += g * S;
        wsum[p] += g * W;
      }
    }
  }
};

#undef KORTEX_NO_UNROLL

template <class ExecSpace, int Dim, int P, int R, bool Stream, int MaxThreads = kMaxTeamThreads,
          int MinTeams = 1>
void launchScratchTiled(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
                        ImageView<typename ExecSpace::memory_space> out, BilateralCoeffs const& c,
                        int radius, TileShape const& t) {
  const Extents ext{static_cast<int>(in.extent(2)), static_cast<int>(in.extent(1)),
                    static_cast<int>(in.extent(0))};
  const std::int64_t tilesX = (ext.nx + t.x - 1) / t.x;
  const std::int64_t tilesY = (ext.ny + t.y - 1) / t.y;
  const std::int64_t tilesZ = (ext.nz + t.z - 1) / t.z;
  const std::int64_t league = tilesX * tilesY * tilesZ;
  if (league > INT_MAX)
    throw InvalidArgument("bilateral ScratchTiled: " + std::to_string(league) +
                          " tiles exceed the league size limit; use a larger tile");
  const int r2 = 2 * radius;
  const std::size_t bytes = scratchBytes(t, radius, Dim);
  // Closures of 512 B or more are copied to CUDA constant memory under a lock per launch.
  static_assert(sizeof(ScratchTiledFunctor<ExecSpace, Dim, P, R, Stream>) < 512,
                "keep the kernel closure small");
  ScratchTiledFunctor<ExecSpace, Dim, P, R, Stream> f{
      in,
      out,
      c,
      ext,
      radius,
      t.x,
      t.y,
      t.z,
      static_cast<int>(tilesX),
      static_cast<int>(tilesY),
      t.x + r2,
      t.y + r2,
      Dim == 2 ? 1 : (Stream ? 2 : t.z + r2),
      static_cast<int>(lutElements(radius, Dim)),
      static_cast<int>(bytes)};
  TiledPolicy<ExecSpace, MaxThreads, MinTeams> policy(exec, static_cast<int>(league), Kokkos::AUTO);
  policy.set_scratch_size(0, Kokkos::PerTeam(bytes));
  Kokkos::parallel_for("kortex::Bilateral::ScratchTiled", policy, f);
}

// Fixed-radius kernels for perThread 4 (the default tiles; perThread 8 measured slower at 126+
// registers); every other tile runs the run-time-radius kernel.
template <class ExecSpace, int Dim, int P, bool Stream>
void dispatchRadius(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
                    ImageView<typename ExecSpace::memory_space> out, BilateralCoeffs const& c,
                    int radius, TileShape const& t) {
  if constexpr (P == 4) {
    switch (radius) {
      case 1: return launchScratchTiled<ExecSpace, Dim, P, 1, Stream>(exec, in, out, c, radius, t);
      case 2: return launchScratchTiled<ExecSpace, Dim, P, 2, Stream>(exec, in, out, c, radius, t);
      case 3: return launchScratchTiled<ExecSpace, Dim, P, 3, Stream>(exec, in, out, c, radius, t);
      case 4: return launchScratchTiled<ExecSpace, Dim, P, 4, Stream>(exec, in, out, c, radius, t);
      case 5: return launchScratchTiled<ExecSpace, Dim, P, 5, Stream>(exec, in, out, c, radius, t);
      case 6: return launchScratchTiled<ExecSpace, Dim, P, 6, Stream>(exec, in, out, c, radius, t);
      case 7: return launchScratchTiled<ExecSpace, Dim, P, 7, Stream>(exec, in, out, c, radius, t);
      case 8: return launchScratchTiled<ExecSpace, Dim, P, 8, Stream>(exec, in, out, c, radius, t);
      default: break;
    }
  }
  launchScratchTiled<ExecSpace, Dim, P, 0, Stream>(exec, in, out, c, radius, t);
}

template <class ExecSpace, int Dim, bool Stream>
void dispatchPerThread(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
                       ImageView<typename ExecSpace::memory_space> out, BilateralCoeffs const& c,
                       int radius, TileShape const& t) {
  switch (t.perThread) {
    case 1: return dispatchRadius<ExecSpace, Dim, 1, Stream>(exec, in, out, c, radius, t);
    case 2: return dispatchRadius<ExecSpace, Dim, 2, Stream>(exec, in, out, c, radius, t);
    case 4: return dispatchRadius<ExecSpace, Dim, 4, Stream>(exec, in, out, c, radius, t);
    case 8: return dispatchRadius<ExecSpace, Dim, 8, Stream>(exec, in, out, c, radius, t);
    default: throw InvalidArgument("bilateral: outputs per thread must be 1, 2, 4 or 8");
  }
}

// The tile gpu::bilateral uses for this image on this execution space.
template <class ExecSpace>
TileShape defaultTileFor(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
                         int radius) {
  const int dim = in.extent(0) == 1 ? 2 : 3;
  const TileShape t =
      defaultTile(dim, radius, kx::scratchSizeMax<TiledPolicy<ExecSpace>>(0));
  return adaptTile(t, static_cast<Index>(in.extent(2)), static_cast<Index>(in.extent(1)),
                   static_cast<Index>(in.extent(0)), dim, kx::concurrency(exec));
}

// ScratchTiled with an explicit starting tile (shrunk by fitTile to the scratch the execution
// space offers). Returns the tile actually used. Enqueues on `exec`, no fence.
template <class ExecSpace>
TileShape scratchTiled(ExecSpace const& exec, ConstImageView<typename ExecSpace::memory_space> in,
                       ImageView<typename ExecSpace::memory_space> out,
                       BilateralParams const& params, TileShape requested) {
  const int dim = checkInputs(in, out, params);
  const std::size_t maxBytes = kx::scratchSizeMax<TiledPolicy<ExecSpace>>(0);
  const TileShape t = fitTile(requested, params.radius, dim, maxBytes);
  const BilateralCoeffs c = bilateralCoeffs(params);
  if (dim == 2)
    dispatchPerThread<ExecSpace, 2, false>(exec, in, out, c, params.radius, t);
  else if (t.streamZ)
    dispatchPerThread<ExecSpace, 3, true>(exec, in, out, c, params.radius, t);
  else
    dispatchPerThread<ExecSpace, 3, false>(exec, in, out, c, params.radius, t);
  return t;
}

}  // namespace kortex::gpu::bilateral_detail
