// Kernels of the LNCC force (specification: core/Greedy.hpp, "Metrics"; entry: gpu/greedy/Lncc.hpp).
// A team owns a kTileX x kTileY tile of one slice; the window sums are separable: a halo of
// (tile + 2R)^2 samples of the slice in team scratch, x sums into a (tile rows + 2R) x kTileX
// buffer, y sums added into the tile's accumulators, once per slice of the window (double
// accumulators: B and C are differences of sums).
#pragma once

#include <Kokkos_Core.hpp>

#include <string>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Greedy.hpp"
#include "gpu/Fields.hpp"
#include "gpu/greedy/Lncc.hpp"

namespace kortex::gpu::lncc_detail {

// 16 x 8 tiles: the scratch of the largest radius (8) stays under the 32 KB of Kokkos 3.4 Serial
// (26 KB for the windows pass, 13 KB for the transpose pass).
inline constexpr int kTileX = 16, kTileY = 8, kTilePoints = kTileX * kTileY;

template <class Exec>
struct Scratch {
  using Floats = Kokkos::View<float*, typename Exec::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  using Doubles = Kokkos::View<double*, typename Exec::scratch_memory_space, Kokkos::MemoryUnmanaged>;
};

// The tile of team `rank` among tilesX x tilesY tiles per slice: its layer (rank / tiles per slice: the
// slice, or Reuse's slab), its origin and its extent inside the grid.
struct LnccTile {
  int layer, x0, y0, tw, th;
  KOKKOS_INLINE_FUNCTION LnccTile(int rank, int tilesX, int tilesY, int ny, int nx) {
    const int tile = rank % (tilesX * tilesY);
    layer = rank / (tilesX * tilesY);
    x0 = (tile % tilesX) * kTileX;
    y0 = (tile / tilesX) * kTileY;
    tw = nx - x0 < kTileX ? nx - x0 : kTileX;
    th = ny - y0 < kTileY ? ny - y0 : kTileY;
  }
};

// The 2D window sums of source slice gz for the tile at (x0, y0), both variants' per-slice phases:
// the halo of W and I1 (clamped loads), the x sums of W, I1, W^2, I1^2, W I1 into xs, then
// sink(k, i, s) with the y sum s of quantity k at tile point i. The caller's barrier precedes it
// (halo and xs free); barriers separate its phases.
template <class Team, class Image, class Floats, class Doubles, class Sink>
KOKKOS_INLINE_FUNCTION void lnccSliceSums(Team const& team, Image const& w, Image const& fixed, Floats const& halo, Doubles const& xs,
                                          int gz, int x0, int y0, int R, int ny, int nx, Sink const& sink) {
  const int side = 2 * R + 1, hx = kTileX + 2 * R, hy = kTileY + 2 * R;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hx * hy), [&](int i) {
    const int ly = i / hx, lx = i - ly * hx;
    const int gy = clampIndex(y0 + ly - R, ny), gx = clampIndex(x0 + lx - R, nx);
    halo(i) = w(gz, gy, gx);
    halo(hx * hy + i) = fixed(gz, gy, gx);
  });
  team.team_barrier();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hy * kTileX), [&](int i) {
    const int ly = i / kTileX, tx = i - ly * kTileX;
    double s[5] = {0.0, 0.0, 0.0, 0.0, 0.0};
    for (int o = 0; o < side; ++o) {
      const double a = halo(ly * hx + tx + o), b = halo(hx * hy + ly * hx + tx + o);
      s[0] += a;
      s[1] += b;
      s[2] += a * a;
      s[3] += b * b;
      s[4] += a * b;
    }
    for (int k = 0; k < 5; ++k) xs(k * hy * kTileX + i) = s[k];
  });
  team.team_barrier();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTilePoints), [&](int i) {
    const int ty = i / kTileX, tx = i - ty * kTileX;
    for (int k = 0; k < 5; ++k) {
      double s = 0.0;
      for (int o = 0; o < side; ++o) s += xs(k * hy * kTileX + (ty + o) * kTileX + tx);
      sink(k, i, s);
    }
  });
}

// The transposed 2D sums of coefficient k on source slice sz for the tile at (x0, y0): its halo (0
// outside the grid), the x sums weighted by lnccTransposeWeight into xs, then sink(i, s) with the
// weighted y sum s at tile point i. The caller's barrier precedes it; barriers separate its phases.
template <class Team, class Terms, class Doubles, class Sink>
KOKKOS_INLINE_FUNCTION void lnccTransposeSliceSums(Team const& team, Terms const& terms, Doubles const& halo, Doubles const& xs, int k,
                                                   int sz, int x0, int y0, int R, int ny, int nx, Sink const& sink) {
  const int hx = kTileX + 2 * R, hy = kTileY + 2 * R;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hx * hy), [&](int i) {
    const int ly = i / hx, lx = i - ly * hx;
    const int sy = y0 + ly - R, sx = x0 + lx - R;
    halo(i) = (sy >= 0 && sy < ny && sx >= 0 && sx < nx) ? terms(k, sz, sy, sx) : 0.0;
  });
  team.team_barrier();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hy * kTileX), [&](int i) {
    const int ly = i / kTileX, tx = i - ly * kTileX, gx = x0 + tx;
    double s = 0.0;
    for (int o = -R; o <= R; ++o) s += lnccTransposeWeight(gx + o, gx, nx, R) * halo(ly * hx + tx + o + R);
    xs(i) = s;
  });
  team.team_barrier();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTilePoints), [&](int i) {
    const int ty = i / kTileX, tx = i - ty * kTileX, gy = y0 + ty;
    double s = 0.0;
    for (int o = -R; o <= R; ++o) s += lnccTransposeWeight(gy + o, gy, ny, R) * xs((ty + o + R) * kTileX + tx);
    sink(i, s);
  });
}

// The force at the tile's voxel (x, y, z) from its transposed sums s[0..3] (lnccForceAt).
template <class Image, class F>
KOKKOS_INLINE_FUNCTION void lnccForceVoxel(Image const& w, Image const& fixed, F const& f, const double* s, int x, int y, int z,
                                           int nz, int ny, int nx) {
  float o[3];
  lnccForceAt(w(z, y, x), fixed(z, y, x), s, w(z, y, clampIndex(x - 1, nx)), w(z, y, clampIndex(x + 1, nx)),
              w(z, clampIndex(y - 1, ny), x), w(z, clampIndex(y + 1, ny), x), w(clampIndex(z - 1, nz), y, x),
              w(clampIndex(z + 1, nz), y, x), o);
  f(0, z, y, x) = o[0];
  f(1, z, y, x) = o[1];
  f(2, z, y, x) = o[2];
}

// Pass 1: the window sums of W, I1, W^2, I1^2, W I1 (clamped indices), each window's coefficients
// (lnccWindowTerms) into `terms`; reduces E = sum cc.
template <class Exec>
struct LnccWindowFunctor {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Floats = typename Scratch<Exec>::Floats;
  using Doubles = typename Scratch<Exec>::Doubles;
  using value_type = double;

  ConstImageView<Mem> w, fixed;
  LnccTerms<Mem> terms;
  int radius, tilesX, tilesY;

  static std::size_t scratchBytes(int R) {
    const int hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    return Floats::shmem_size(2 * hx * hy) + Doubles::shmem_size(5 * hy * kTileX) +
           Doubles::shmem_size(5 * kTilePoints);
  }

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team, double& energy) const { run(team, &energy); }
  KOKKOS_INLINE_FUNCTION void operator()(Team const& team) const { run(team, nullptr); }

  KOKKOS_INLINE_FUNCTION void run(Team const& team, double* energy) const {
    const int nz = static_cast<int>(w.extent(0)), ny = static_cast<int>(w.extent(1)), nx = static_cast<int>(w.extent(2));
    const int R = radius, side = 2 * R + 1, hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    const LnccTile t(team.league_rank(), tilesX, tilesY, ny, nx);
    const int z = t.layer, x0 = t.x0, y0 = t.y0, tw = t.tw, th = t.th;
    Floats halo(team.team_scratch(0), 2 * hx * hy);
    Doubles xs(team.team_scratch(0), 5 * hy * kTileX);
    Doubles acc(team.team_scratch(0), 5 * kTilePoints);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, 5 * kTilePoints), [&](int i) { acc(i) = 0.0; });
    for (int dz = -R; dz <= R; ++dz) {
      const int gz = clampIndex(z + dz, nz);
      team.team_barrier();  // the last slice's y sums are done with xs and halo
      lnccSliceSums(team, w, fixed, halo, xs, gz, x0, y0, R, ny, nx, [&](int k, int i, double s) { acc(k * kTilePoints + i) += s; });
    }
    team.team_barrier();
    const double n = double(side) * side * side;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tw * th), [&](int i) {
      const int ty = i / tw, tx = i - ty * tw, j = ty * kTileX + tx;
      double c[4];
      const double e = lnccWindowTerms(acc(j), acc(kTilePoints + j), acc(2 * kTilePoints + j), acc(3 * kTilePoints + j),
                                       acc(4 * kTilePoints + j), n, c);
      if (energy) *energy += e;
      for (int k = 0; k < 4; ++k) terms(k, z, y0 + ty, x0 + tx) = c[k];
    });
  }
};

// Pass 2: S[c](y) = sum_x K(x, y) c(x) of the four coefficients (lnccTransposeWeight per axis),
// then F(y) = G(y) grad W(y) (lnccForceAt).
template <class Exec>
struct LnccTransposeFunctor {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Doubles = typename Scratch<Exec>::Doubles;

  ConstImageView<Mem> w, fixed;
  Kokkos::View<const double****, Kokkos::LayoutRight, Mem> terms;
  Field<Mem> f;
  int radius, tilesX, tilesY;

  static std::size_t scratchBytes(int R) {
    const int hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    return Doubles::shmem_size(hx * hy) + Doubles::shmem_size(hy * kTileX) + Doubles::shmem_size(4 * kTilePoints);
  }

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team) const {
    const int nz = static_cast<int>(w.extent(0)), ny = static_cast<int>(w.extent(1)), nx = static_cast<int>(w.extent(2));
    const int R = radius, hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    const LnccTile t(team.league_rank(), tilesX, tilesY, ny, nx);
    const int z = t.layer, x0 = t.x0, y0 = t.y0, tw = t.tw, th = t.th;
    Doubles halo(team.team_scratch(0), hx * hy);
    Doubles xs(team.team_scratch(0), hy * kTileX);
    Doubles acc(team.team_scratch(0), 4 * kTilePoints);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, 4 * kTilePoints), [&](int i) { acc(i) = 0.0; });
    for (int dz = -R; dz <= R; ++dz) {
      const int sz = z + dz;
      const double kz = double(lnccTransposeWeight(sz, z, nz, R));
      if (kz == 0.0) continue;  // the same for the whole team
      for (int k = 0; k < 4; ++k) {
        team.team_barrier();
        lnccTransposeSliceSums(team, terms, halo, xs, k, sz, x0, y0, R, ny, nx, [&](int i, double s) { acc(k * kTilePoints + i) += kz * s; });
      }
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tw * th), [&](int i) {
      const int ty = i / tw, tx = i - ty * tw, j = ty * kTileX + tx, y = y0 + ty, x = x0 + tx;
      const double s[4] = {acc(j), acc(kTilePoints + j), acc(2 * kTilePoints + j), acc(3 * kTilePoints + j)};
      lnccForceVoxel(w, fixed, f, s, x, y, z, nz, ny, nx);
    });
  }
};

// ---- Reuse: a team owns a tile of `slabZ` consecutive slices and walks them in z. Each source
// slice's 2D window sums (x, then y: the Recompute passes' sums) are formed once and kept in a ring
// of 2R+1 slices in team scratch; a slice's window adds the ring's slices in the order dz = -R..R,
// as Recompute adds them: the same terms and force, bit for bit, for any slab depth. Source slices
// per output slice: (slabZ + 2R) / slabZ instead of 2R + 1; deeper slabs, fewer teams.
inline constexpr int kMaxSlabZ = 16;
// Teams a device pass aims at: about one wave on an H100/H200 (132 SMs x 6 teams of 35 KB scratch);
// slabs are made shallower until the grid gives that many (the coarse scales: slabs of 1 slice).
inline constexpr int kLnccTargetTeams = 1024;

// The slab depth of a grid of `tiles` tiles per slice and nz slices: kMaxSlabZ on host back ends
// (teams are not the limit there), else as deep as kLnccTargetTeams teams allow.
KOKKOS_INLINE_FUNCTION int lnccSlabDepth(int tiles, int nz, bool device) {
  if (!device) return kMaxSlabZ;
  const long perTeam = (long(tiles) * nz) / kLnccTargetTeams;
  return perTeam < 1 ? 1 : perTeam > kMaxSlabZ ? kMaxSlabZ : int(perTeam);
}

// The ring slot of source slice zs in a slab starting at zb.
KOKKOS_INLINE_FUNCTION int lnccRingSlot(int zs, int zb, int R) { return (zs - zb + R) % (2 * R + 1); }

// Pass 1 (Reuse): LnccWindowFunctor's sums, terms and energy (when reduced).
template <class Exec>
struct LnccWindowReuseFunctor {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Floats = typename Scratch<Exec>::Floats;
  using Doubles = typename Scratch<Exec>::Doubles;
  using value_type = double;

  ConstImageView<Mem> w, fixed;
  LnccTerms<Mem> terms;
  int radius, tilesX, tilesY, slabZ;

  static std::size_t scratchBytes(int R) {
    const int hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    return Floats::shmem_size(2 * hx * hy) + Doubles::shmem_size(5 * hy * kTileX) +
           Doubles::shmem_size(5 * (2 * R + 1) * kTilePoints);
  }

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team, double& energy) const { run(team, &energy); }
  KOKKOS_INLINE_FUNCTION void operator()(Team const& team) const { run(team, nullptr); }

  KOKKOS_INLINE_FUNCTION void run(Team const& team, double* energy) const {
    const int nz = static_cast<int>(w.extent(0)), ny = static_cast<int>(w.extent(1)), nx = static_cast<int>(w.extent(2));
    const int R = radius, side = 2 * R + 1, hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    const LnccTile t(team.league_rank(), tilesX, tilesY, ny, nx);
    const int zb = t.layer * slabZ, ze = nz - zb < slabZ ? nz : zb + slabZ;
    const int x0 = t.x0, y0 = t.y0, tw = t.tw, th = t.th;
    Floats halo(team.team_scratch(0), 2 * hx * hy);
    Doubles xs(team.team_scratch(0), 5 * hy * kTileX);
    Doubles ring(team.team_scratch(0), 5 * side * kTilePoints);
    const double n = double(side) * side * side;
    for (int zs = zb - R; zs < ze + R; ++zs) {
      const int gz = clampIndex(zs, nz), slot = lnccRingSlot(zs, zb, R);
      team.team_barrier();  // the last slice's sums and window are done with halo, xs and this slot
      lnccSliceSums(team, w, fixed, halo, xs, gz, x0, y0, R, ny, nx,
                    [&](int k, int i, double s) { ring((slot * 5 + k) * kTilePoints + i) = s; });
      if (zs < zb + R) continue;  // the window of slice zs - R is complete from here on
      const int z = zs - R;
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tw * th), [&](int i) {
        const int ty = i / tw, tx = i - ty * tw, j = ty * kTileX + tx;
        double a[5];
        for (int k = 0; k < 5; ++k) {
          double s = 0.0;
          for (int dz = -R; dz <= R; ++dz) s += ring((lnccRingSlot(z + dz, zb, R) * 5 + k) * kTilePoints + j);
          a[k] = s;
        }
        double c[4];
        const double e = lnccWindowTerms(a[0], a[1], a[2], a[3], a[4], n, c);
        if (energy) *energy += e;
        for (int k = 0; k < 4; ++k) terms(k, z, y0 + ty, x0 + tx) = c[k];
      });
    }
  }
};

// Pass 2 (Reuse): LnccTransposeFunctor's transposed sums and force.
template <class Exec>
struct LnccTransposeReuseFunctor {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Doubles = typename Scratch<Exec>::Doubles;

  ConstImageView<Mem> w, fixed;
  Kokkos::View<const double****, Kokkos::LayoutRight, Mem> terms;
  Field<Mem> f;
  int radius, tilesX, tilesY, slabZ;

  static std::size_t scratchBytes(int R) {
    const int hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    return Doubles::shmem_size(hx * hy) + Doubles::shmem_size(hy * kTileX) + Doubles::shmem_size(4 * (2 * R + 1) * kTilePoints);
  }

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team) const {
    const int nz = static_cast<int>(w.extent(0)), ny = static_cast<int>(w.extent(1)), nx = static_cast<int>(w.extent(2));
    const int R = radius, hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    const LnccTile t(team.league_rank(), tilesX, tilesY, ny, nx);
    const int zb = t.layer * slabZ, ze = nz - zb < slabZ ? nz : zb + slabZ;
    const int x0 = t.x0, y0 = t.y0, tw = t.tw, th = t.th;
    Doubles halo(team.team_scratch(0), hx * hy);
    Doubles xs(team.team_scratch(0), hy * kTileX);
    Doubles ring(team.team_scratch(0), 4 * (2 * R + 1) * kTilePoints);
    for (int zs = zb - R; zs < ze + R; ++zs) {
      const int slot = lnccRingSlot(zs, zb, R);
      if (zs >= 0 && zs < nz) {  // outside the grid every weight is 0: the slot is never read
        for (int k = 0; k < 4; ++k) {
          team.team_barrier();  // the last phase is done with halo and xs (k = 0: the last window with this slot)
          lnccTransposeSliceSums(team, terms, halo, xs, k, zs, x0, y0, R, ny, nx,
                                 [&](int i, double s) { ring((slot * 4 + k) * kTilePoints + i) = s; });
        }
      }
      if (zs < zb + R) continue;  // the window of slice zs - R is complete from here on
      const int z = zs - R;
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tw * th), [&](int i) {
        const int ty = i / tw, tx = i - ty * tw, j = ty * kTileX + tx, y = y0 + ty, x = x0 + tx;
        double s[4] = {0.0, 0.0, 0.0, 0.0};
        for (int dz = -R; dz <= R; ++dz) {
          const double kz = double(lnccTransposeWeight(z + dz, z, nz, R));
          if (kz == 0.0) continue;
          for (int k = 0; k < 4; ++k) s[k] += kz * ring((lnccRingSlot(z + dz, zb, R) * 4 + k) * kTilePoints + j);
        }
        lnccForceVoxel(w, fixed, f, s, x, y, z, nz, ny, nx);
      });
    }
  }
};

// ---- Separable: three passes over the grid, one axis each, every voxel a work item (no team
// scratch, no barrier), through the workspace's two buffers of 5 sums per voxel that follow the 4
// terms (kLnccSeparableComponents): x sums, y sums, then the z sums with the terms (windows) or the
// force (transpose). Each sum is the Recompute passes' sum in its order (x, then y, then z; offsets
// -R..R; the transpose's weights and zeros outside the grid): the same terms and force bit for bit.
inline constexpr int kLnccSeparableComponents = 4 + 2 * 5;

// Windows, x: the 5 sums of W, I1, W^2, I1^2, W I1 over clamp(x + o), o = -R..R.
template <class Mem, class Sums>
struct LnccWindowXFunctor {
  ConstImageView<Mem> w, fixed;
  Sums out;
  int R, nx;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    double s[5] = {0.0, 0.0, 0.0, 0.0, 0.0};
    for (int o = -R; o <= R; ++o) {
      const int gx = clampIndex(x + o, nx);
      const double a = w(z, y, gx), b = fixed(z, y, gx);
      s[0] += a;
      s[1] += b;
      s[2] += a * a;
      s[3] += b * b;
      s[4] += a * b;
    }
    for (int k = 0; k < 5; ++k) out(k, z, y, x) = s[k];
  }
};

// Windows, y: the x sums' sums over clamp(y + o).
template <class In, class Out>
struct LnccWindowYFunctor {
  In in;
  Out out;
  int R, ny;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    for (int k = 0; k < 5; ++k) {
      double s = 0.0;
      for (int o = -R; o <= R; ++o) s += in(k, z, clampIndex(y + o, ny), x);
      out(k, z, y, x) = s;
    }
  }
};

// Windows, z: the window sums over clamp(z + o), each window's coefficients into `terms`; E = sum cc
// when reduced.
template <class Mem, class In>
struct LnccWindowZFunctor {
  using value_type = double;
  In in;
  LnccTerms<Mem> terms;
  int R, nz, ny, nx;
  KOKKOS_INLINE_FUNCTION void operator()(int i) const { run(i, nullptr); }
  KOKKOS_INLINE_FUNCTION void operator()(int i, double& energy) const { run(i, &energy); }
  KOKKOS_INLINE_FUNCTION void run(int i, double* energy) const {
    const int row = i / nx, x = i - row * nx, z = row / ny, y = row - z * ny;
    const int side = 2 * R + 1;
    double a[5];
    for (int k = 0; k < 5; ++k) {
      double s = 0.0;
      for (int o = -R; o <= R; ++o) s += in(k, clampIndex(z + o, nz), y, x);
      a[k] = s;
    }
    double c[4];
    const double e = lnccWindowTerms(a[0], a[1], a[2], a[3], a[4], double(side) * side * side, c);
    if (energy) *energy += e;
    for (int k = 0; k < 4; ++k) terms(k, z, y, x) = c[k];
  }
};

// Transpose, x: S_x[c](x) = sum_o K(x + o, x) c(x + o) of the 4 coefficients (0 outside the grid).
template <class Mem, class Out>
struct LnccTransposeXFunctor {
  Kokkos::View<const double****, Kokkos::LayoutRight, Mem> terms;
  Out out;
  int R, nx;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    for (int k = 0; k < 4; ++k) {
      double s = 0.0;
      for (int o = -R; o <= R; ++o) {
        const int sx = x + o;
        const double v = (sx >= 0 && sx < nx) ? terms(k, z, y, sx) : 0.0;
        s += lnccTransposeWeight(sx, x, nx, R) * v;
      }
      out(k, z, y, x) = s;
    }
  }
};

// Transpose, y: the same along y of the x sums.
template <class In, class Out>
struct LnccTransposeYFunctor {
  In in;
  Out out;
  int R, ny;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    for (int k = 0; k < 4; ++k) {
      double s = 0.0;
      for (int o = -R; o <= R; ++o) {
        const int sy = y + o;
        const double v = (sy >= 0 && sy < ny) ? in(k, z, sy, x) : 0.0;
        s += lnccTransposeWeight(sy, y, ny, R) * v;
      }
      out(k, z, y, x) = s;
    }
  }
};

// Transpose, z: the weighted z sums (planes of weight 0 skipped, as the tiled passes skip them),
// then F = G grad W (lnccForceAt).
template <class Mem, class In>
struct LnccTransposeZFunctor {
  In in;
  ConstImageView<Mem> w, fixed;
  Field<Mem> f;
  int R, nz, ny, nx;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    for (int o = -R; o <= R; ++o) {
      const double kz = double(lnccTransposeWeight(z + o, z, nz, R));
      if (kz == 0.0) continue;
      for (int k = 0; k < 4; ++k) s[k] += kz * in(k, z + o, y, x);
    }
    lnccForceVoxel(w, fixed, f, s, x, y, z, nz, ny, nx);
  }
};

// ---- ScratchTiled: each pass's x and y sums of a slice's tile formed in team scratch (lnccSliceSums,
// lnccTransposeSliceSums: Recompute's sums of one source slice), written to the 5 components that follow
// the 4 terms in the workspace (kLnccScratchTiledComponents), then Separable's z pass over the grid.
// Separable's sums in its order: the same terms and force bit for bit; 4 kernels per force instead of 6,
// and the x sums never pass through memory.
inline constexpr int kLnccScratchTiledComponents = 4 + 5;

// Windows, x and y: the 2D sums of W, I1, W^2, I1^2, W I1 of slice z at the team's tile into out(0..4).
template <class Exec, class Out>
struct LnccWindowXYFunctor {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Floats = typename Scratch<Exec>::Floats;
  using Doubles = typename Scratch<Exec>::Doubles;

  ConstImageView<Mem> w, fixed;
  Out out;
  int radius, tilesX, tilesY;

  static std::size_t scratchBytes(int R) {
    const int hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    return Floats::shmem_size(2 * hx * hy) + Doubles::shmem_size(5 * hy * kTileX);
  }

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team) const {
    const int ny = static_cast<int>(w.extent(1)), nx = static_cast<int>(w.extent(2));
    const int R = radius, hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    const LnccTile t(team.league_rank(), tilesX, tilesY, ny, nx);
    const int z = t.layer, x0 = t.x0, y0 = t.y0, tw = t.tw, th = t.th;
    Floats halo(team.team_scratch(0), 2 * hx * hy);
    Doubles xs(team.team_scratch(0), 5 * hy * kTileX);
    lnccSliceSums(team, w, fixed, halo, xs, z, x0, y0, R, ny, nx, [&](int k, int i, double s) {
      const int ty = i / kTileX, tx = i - ty * kTileX;
      if (tx < tw && ty < th) out(k, z, y0 + ty, x0 + tx) = s;
    });
  }
};

// Transpose, x and y: the weighted 2D sums of the 4 coefficients of slice z at the team's tile into out(0..3).
template <class Exec, class Out>
struct LnccTransposeXYFunctor {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Doubles = typename Scratch<Exec>::Doubles;

  Kokkos::View<const double****, Kokkos::LayoutRight, Mem> terms;
  Out out;
  int radius, tilesX, tilesY;

  static std::size_t scratchBytes(int R) {
    const int hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    return Doubles::shmem_size(hx * hy) + Doubles::shmem_size(hy * kTileX);
  }

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team) const {
    const int ny = static_cast<int>(terms.extent(2)), nx = static_cast<int>(terms.extent(3));
    const int R = radius, hx = kTileX + 2 * R, hy = kTileY + 2 * R;
    const LnccTile t(team.league_rank(), tilesX, tilesY, ny, nx);
    const int z = t.layer, x0 = t.x0, y0 = t.y0, tw = t.tw, th = t.th;
    Doubles halo(team.team_scratch(0), hx * hy);
    Doubles xs(team.team_scratch(0), hy * kTileX);
    for (int k = 0; k < 4; ++k) {
      if (k > 0) team.team_barrier();  // the last coefficient's y sums are done with halo and xs
      lnccTransposeSliceSums(team, terms, halo, xs, k, z, x0, y0, R, ny, nx, [&](int i, double s) {
        const int ty = i / kTileX, tx = i - ty * kTileX;
        if (tx < tw && ty < th) out(k, z, y0 + ty, x0 + tx) = s;
      });
    }
  }
};

// A team policy of `teams` tiles with `bytes` of level-0 scratch, refused when the back end offers less.
template <class Exec>
Kokkos::TeamPolicy<Exec> lnccPolicy(Exec const& exec, int teams, std::size_t bytes, const char* pass) {
  using Policy = Kokkos::TeamPolicy<Exec>;
  const std::size_t maxBytes = kx::scratchSizeMax<Policy>(0);
  if (bytes > maxBytes)
    throw InvalidArgument(std::string("LNCC force: the ") + pass + " tile needs " + std::to_string(bytes) +
                          " B of team scratch, the back end offers " + std::to_string(maxBytes) + " B");
  Policy policy(exec, teams, Kokkos::AUTO);
  policy.set_scratch_size(0, Kokkos::PerTeam(bytes));
  return policy;
}

}  // namespace kortex::gpu::lncc_detail
