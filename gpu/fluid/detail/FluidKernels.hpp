// Kernels of the fluid solves (specification: core/Fluid.hpp): matvec, residual, SOR (Naive and
// ScratchTiled), the spectral symbol division, CSR assembly and SpMV, CG vector updates.
#pragma once

#include <Kokkos_Core.hpp>

#include <cmath>
#include <string>

#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "core/Fluid.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu::fluid_detail {

template <class Mem>
using ComplexField = Kokkos::View<Kokkos::complex<float>****, Kokkos::LayoutRight, Mem>;

// out = L v, one voxel per work item (all three components).
template <class Mem>
struct ApplyFunctor {
  ConstField<Mem> v;
  Field<Mem> out;
  FluidOperator op;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    float o[3];
    fluidApply(v, op, z, y, x, o);
    out(0, z, y, x) = o[0];
    out(1, z, y, x) = o[1];
    out(2, z, y, x) = o[2];
  }
};

// sum |F - L v|^2 and sum |F|^2 over a flat voxel range.
struct ResidualSums {
  double rr, ff;
};
template <class Mem>
struct ResidualFunctor {
  using value_type = ResidualSums;
  ConstField<Mem> f, v;
  FluidOperator op;
  KOKKOS_INLINE_FUNCTION void operator()(int i, value_type& sum) const {
    const int nx = static_cast<int>(v.extent(3)), ny = static_cast<int>(v.extent(2));
    const int row = i / nx, x = i - row * nx, y = row % ny, z = row / ny;
    float o[3];
    fluidApply(v, op, z, y, x, o);
    for (int c = 0; c < 3; ++c) {
      const double fc = f(c, z, y, x);
      const double r = fc - double(o[c]);
      sum.rr += r * r;
      sum.ff += fc * fc;
    }
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& s) const { s.rr = s.ff = 0.0; }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type& d, const KORTEX_JOIN_VOLATILE value_type& s) const {
    d.rr += s.rr;
    d.ff += s.ff;
  }
};

inline double relativeResidual(ResidualSums const& s) {
  return s.ff > 0.0 ? std::sqrt(s.rr / s.ff) : std::sqrt(s.rr);
}

// One colour of a red-black SOR sweep in place: work item (z, y, half-row index) updates the
// voxel x = 2 xi + ((z + y + colour) & 1), all three components.
template <class Mem>
struct SorNaiveFunctor {
  ConstField<Mem> f;
  Field<Mem> v;
  FluidOperator op;
  float omega;
  int colour;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int xi) const {
    const int nz = static_cast<int>(v.extent(1)), ny = static_cast<int>(v.extent(2)),
              nx = static_cast<int>(v.extent(3));
    const int x = 2 * xi + ((z + y + colour) & 1);
    const int zm = fluidWrap(z - 1, nz), zp = fluidWrap(z + 1, nz);
    const int ym = fluidWrap(y - 1, ny), yp = fluidWrap(y + 1, ny);
    const int xm = fluidWrap(x - 1, nx), xp = fluidWrap(x + 1, nx);
    for (int c = 0; c < 3; ++c) {
      const float nb = v(c, z, y, xm) + v(c, z, y, xp) + v(c, z, ym, x) + v(c, z, yp, x) + v(c, zm, y, x) +
                       v(c, zp, y, x);
      v(c, z, y, x) = fluidSorUpdate(op, omega, v(c, z, y, x), f(c, z, y, x), nb);
    }
  }
};

// Block SOR (Algorithm 3): one full red-black sweep per launch, in -> out. A team owns an xy tile
// (effective width w <= kTileX, height h <= kTileY) and marches along z through slices
// k = -1 .. nz (wrapped), with a ring of 4 slots of the tile + 2-voxel apron in scratch, holding
// the three components. At step k: load slice k + 1 (old values), update red on slice k over the
// tile + 1 apron (the apron's red values are recomputed, identically, by the neighbouring
// tiles), then black on slice k - 1 over the tile from the new red of slices k - 2 .. k. Red and
// black values of the tile are written to `out`. Every value is computed by the same operations
// as SorNaiveFunctor, in the same order, so both give identical results.
template <class Exec>
struct SorTiledFunctor {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Scratch = Kokkos::View<float*, typename Exec::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  // 32 x 8 tiles: 36 x 12 x 4 slots x 3 components x 4 B = 20.7 KB of scratch (fits the 32 KB of
  // Kokkos 3.4 Serial and the ~40 KB of CUDA). Chosen for coalesced 32-wide rows; the tile
  // sweep of the benchmark (bench greedy) records the measurement.
  static constexpr int kTileX = 32, kTileY = 8, kApron = 2, kSlots = 4;
  static constexpr int kPitchX = kTileX + 2 * kApron, kPitchY = kTileY + 2 * kApron;
  static constexpr int kSlotFloats = 3 * kPitchX * kPitchY;

  // Slices per team along z: the league is tiles x chunks, so that a grid of a few xy tiles still
  // fills a GPU; each chunk recomputes the red of its two end slices from old values (k = z0 - 1
  // and k = z1), 2 extra red slices per 16.
  static constexpr int kChunkZ = 16;

  ConstField<Mem> f, in;
  Field<Mem> out;
  FluidOperator op;
  float omega;
  int tilesX, tilesY;

  static std::size_t scratchBytes() { return Scratch::shmem_size(kSlots * kSlotFloats); }

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team) const {
    const int nz = static_cast<int>(in.extent(1)), ny = static_cast<int>(in.extent(2)),
              nx = static_cast<int>(in.extent(3));
    const int tile = team.league_rank() % (tilesX * tilesY), chunk = team.league_rank() / (tilesX * tilesY);
    const int x0 = (tile % tilesX) * kTileX, y0 = (tile / tilesX) * kTileY;
    const int z0 = chunk * kChunkZ, z1 = z0 + kChunkZ < nz ? z0 + kChunkZ : nz;
    const int w = nx - x0 < kTileX ? nx - x0 : kTileX, h = ny - y0 < kTileY ? ny - y0 : kTileY;
    const int lw = w + 2 * kApron, lh = h + 2 * kApron;  // loaded region (local pitch kPitchX)
    Scratch ring(team.team_scratch(0), kSlots * kSlotFloats);
    auto at = [&](int slot, int c, int ly, int lx) -> float& {
      return ring(slot * kSlotFloats + (c * kPitchY + ly) * kPitchX + lx);
    };
    auto slotOf = [](int k) { return (k + 2) & 3; };  // k >= -2
    auto load = [&](int k) {
      const int zs = fluidWrap(k, nz), s = slotOf(k);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lw * lh), [&](int i) {
        const int ly = i / lw, lx = i % lw;
        const int gy = fluidWrap(y0 + ly - kApron, ny), gx = fluidWrap(x0 + lx - kApron, nx);
        for (int c = 0; c < 3; ++c) at(s, c, ly, lx) = in(c, zs, gy, gx);
      });
    };
    load(z0 - 2);  // red on slice z0 - 1 (nz - 1 for the first chunk) reads slices z0 - 2 .. z0
    load(z0 - 1);
    for (int k = z0 - 1; k <= z1; ++k) {
      load(k + 1);
      team.team_barrier();
      // Red on slice k over the tile + 1 apron, in place in slot(k).
      {
        const int s = slotOf(k), sm = slotOf(k - 1), sp = slotOf(k + 1);
        const int zk = fluidWrap(k, nz);
        const int rw = w + 2, rh = h + 2;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rw * rh), [&](int i) {
          const int ly = i / rw + 1, lx = i % rw + 1;  // local coordinates in the loaded region
          const int gy = y0 + ly - kApron, gx = x0 + lx - kApron;  // unwrapped (parity preserved)
          if (((zk + gy + gx) & 1) != 0) return;
          const int fy = fluidWrap(gy, ny), fx = fluidWrap(gx, nx);
          for (int c = 0; c < 3; ++c) {
            const float nb = at(s, c, ly, lx - 1) + at(s, c, ly, lx + 1) + at(s, c, ly - 1, lx) +
                             at(s, c, ly + 1, lx) + at(sm, c, ly, lx) + at(sp, c, ly, lx);
            const float nv = fluidSorUpdate(op, omega, at(s, c, ly, lx), f(c, zk, fy, fx), nb);
            at(s, c, ly, lx) = nv;
            if (k >= z0 && k < z1 && lx >= kApron && lx < kApron + w && ly >= kApron && ly < kApron + h)
              out(c, zk, fy, fx) = nv;
          }
        });
      }
      team.team_barrier();
      // Black on slice k - 1 over the tile.
      if (k - 1 >= z0) {
        const int kb = k - 1;
        const int s = slotOf(kb), sm = slotOf(kb - 1), sp = slotOf(kb + 1);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w * h), [&](int i) {
          const int ly = i / w + kApron, lx = i % w + kApron;
          const int gy = y0 + ly - kApron, gx = x0 + lx - kApron;
          if (((kb + gy + gx) & 1) != 1) return;
          for (int c = 0; c < 3; ++c) {
            const float nb = at(s, c, ly, lx - 1) + at(s, c, ly, lx + 1) + at(s, c, ly - 1, lx) +
                             at(s, c, ly + 1, lx) + at(sm, c, ly, lx) + at(sp, c, ly, lx);
            out(c, kb, gy, gx) = fluidSorUpdate(op, omega, at(s, c, ly, lx), f(c, kb, gy, gx), nb);
          }
        });
      }
      team.team_barrier();
    }
  }
};

// Spectrum <- Lhat^{-1} spectrum / N (N = nz ny nx: the inverse FFT is unnormalised).
template <class Mem>
struct SymbolFunctor {
  ComplexField<Mem> s;
  FluidOperator op;
  int nz, ny, nx;
  float scale;
  KOKKOS_INLINE_FUNCTION void operator()(int kz, int ky, int kx) const {
    float re[3], im[3];
    for (int c = 0; c < 3; ++c) {
      re[c] = s(c, kz, ky, kx).real();
      im[c] = s(c, kz, ky, kx).imag();
    }
    fluidSymbolSolve(op, kz, ky, kx, nz, ny, nx, re, im);
    for (int c = 0; c < 3; ++c) s(c, kz, ky, kx) = Kokkos::complex<float>(scale * re[c], scale * im[c]);
  }
};

// CSR assembly of L: row r = (c, z, y, x) flattened like the field; every row stores the same
// number of entries (7 or 15) in a fixed order (core/Fluid.hpp's stencil; the periodic wrap never
// merges two entries since every extent >= 4).
template <class Mem>
struct CsrAssembleFunctor {
  Kokkos::View<int*, Mem> row, col;
  Kokkos::View<float*, Mem> val;
  FluidOperator op;
  int nz, ny, nx, perRow;
  KOKKOS_INLINE_FUNCTION int index(int c, int z, int y, int x) const {
    return ((c * nz + fluidWrap(z, nz)) * ny + fluidWrap(y, ny)) * nx + fluidWrap(x, nx);
  }
  KOKKOS_INLINE_FUNCTION void operator()(int r) const {
    const int x = r % nx, y = (r / nx) % ny, z = (r / (nx * ny)) % nz, c = r / (nx * ny * nz);
    int e = r * perRow;
    row(r + 1) = (r + 1) * perRow;
    if (r == 0) row(0) = 0;
    auto put = [&](int cc, int dz, int dy, int dx, float v) {
      col(e) = index(cc, z + dz, y + dy, x + dx);
      val(e) = v;
      ++e;
    };
    const int ax[3][3] = {{0, 0, 1}, {0, 1, 0}, {1, 0, 0}};  // (dz, dy, dx) of axes x, y, z
    put(c, 0, 0, 0, 6.0f * op.alpha + op.gamma + 2.0f * op.beta);
    for (int j = 0; j < 3; ++j)
      for (int sgn = -1; sgn <= 1; sgn += 2)
        put(c, sgn * ax[j][0], sgn * ax[j][1], sgn * ax[j][2], -op.alpha - (j == c ? op.beta : 0.0f));
    if (perRow == 15)
      for (int j = 0; j < 3; ++j) {
        if (j == c) continue;
        for (int sc = -1; sc <= 1; sc += 2)
          for (int sj = -1; sj <= 1; sj += 2)
            put(j, sc * ax[c][0] + sj * ax[j][0], sc * ax[c][1] + sj * ax[j][1], sc * ax[c][2] + sj * ax[j][2],
                -0.25f * op.beta * static_cast<float>(sc * sj));
      }
  }
};

// y = A x on flat views (one row per work item).
template <class Mem>
struct CsrSpmvFunctor {
  Kokkos::View<const int*, Mem> row, col;
  Kokkos::View<const float*, Mem> val;
  Kokkos::View<const float*, Mem> x;
  Kokkos::View<float*, Mem> y;
  KOKKOS_INLINE_FUNCTION void operator()(int r) const {
    float s = 0.0f;
    for (int e = row(r); e < row(r + 1); ++e) s += val(e) * x(col(e));
    y(r) = s;
  }
};

}  // namespace kortex::gpu::fluid_detail
