// Force variant Reuse (the paper's fastest): TeamPolicy, one team per xy tile of tx * ty voxels
// and z chunk, marching through the chunk. Each stress W = Phi'(J) cof(I - G) is computed ONCE
// per grid point and slice (cooperatively) and then read from scratch by the six neighbours that
// need it, instead of seven times as in Naive and Recompute.
//
// Scratch (level 0), every buffer a ring indexed by slice (recycled as the tile advances: no
// copies), component-major, x fastest:
//   U   3 u slices (s-1, s, s+1) x 3 components on the tile + 2-voxel apron, (tx+4)(ty+4) each,
//       clamp rule applied at load (the stress on the tile + 1 apron needs u one voxel further);
//   WX  2 slices x W_i0 (i = 0..2, the x column) on (tx+2) x ty: the tile + 1 apron in x;
//   WY  2 slices x W_i1 (the y column) on tx x (ty+2): the tile + 1 apron in y;
//   WZ  3 slices x W_i2 (the z column) on the tile.
// That is "only what is needed": f_reg_i(y) = sum_j D_j^T W_ij reads column j of W at y +- e_j
// and at y, so the corners of the apron and the z column off the tile are never stored.
// Step s (s = z0 - 1 .. z0 + chunk): load u slice s + 1 (TeamThreadRange, coalesced) ->
// team_barrier -> W of slice s on the tile + 1 apron (corners skipped), one point per work item,
// J and Phi(J) reduced for the tile's own voxels -> team_barrier -> assemble f at slice s - 1
// from WX/WY of slice s - 1 and WZ of slices s - 2, s - 1, s, plus the data term (u(y) and the
// moving image from global memory: the u ring's slice s - 1 is overwritten by the next load
// without a barrier in between). Two barriers per slice; the ring slots written in step s were
// last read before the previous step's second barrier (see the comments in the loop).
#pragma once

#include <Kokkos_Core.hpp>
#include <cstddef>

#include "gpu/registration/detail/RegistrationKernels.hpp"

namespace kortex::gpu::registration_detail {

template <class Exec>
struct ReuseForceFunctor {
  KORTEX_REGISTRATION_ENERGY_REDUCER
  using Mem = typename Exec::memory_space;
  using member_type = typename Kokkos::TeamPolicy<Exec>::member_type;
  using scratch_view = Kokkos::View<float*, typename Exec::scratch_memory_space,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  static constexpr int kUSlices = 3;
  static constexpr int kXYSlices = 2;
  static constexpr int kZSlices = 3;

  ForceViews<Mem> v;
  Extents e;
  float lambda = 0.0f;
  int tx = 1, ty = 1, chunk = 1, tilesX = 1, tilesY = 1;

  KOKKOS_INLINE_FUNCTION static std::size_t scratchFloats(int tx, int ty) {
    const std::size_t X = static_cast<std::size_t>(tx), Y = static_cast<std::size_t>(ty);
    return kUSlices * 3 * (X + 4) * (Y + 4) + kXYSlices * 3 * ((X + 2) * Y + X * (Y + 2)) +
           kZSlices * 3 * X * Y;
  }

  KOKKOS_FUNCTION void operator()(member_type const& team, EnergySums& acc) const {
    const int ax = tx + 4, ay = ty + 4, axy = ax * ay, uSlice = 3 * axy;
    const int bx = tx + 2, by = ty + 2;
    const int wxPlane = bx * ty, wyPlane = tx * by, wzPlane = tx * ty;
    scratch_view buf(team.team_scratch(0), scratchFloats(tx, ty));
    float* U = buf.data();
    float* WX = U + kUSlices * uSlice;
    float* WY = WX + kXYSlices * 3 * wxPlane;
    float* WZ = WY + kXYSlices * 3 * wyPlane;

    const TeamTile tile = teamTile(team.league_rank(), tx, ty, chunk, tilesX, tilesY, e.nz);
    const int x0 = tile.x0, y0 = tile.y0, zB = tile.zB, zE = tile.zE;

    auto load = [&](int zz) {
      loadApronSlice(team, v.u, e, U + ringSlot(zz, kUSlices) * uSlice, zz, x0, y0, 2, ax, ay);
    };

    // W of slice s on the tile + 1 apron (corners skipped; points outside the grid are never
    // read by the assembly and skipped too). `own`: s belongs to this team's chunk, so J of the
    // tile's voxels enters the reduction.
    auto computeW = [&](int s, bool own) {
      const float* Sm = U + ringSlot(s - 1, kUSlices) * uSlice;
      const float* S0 = U + ringSlot(s, kUSlices) * uSlice;
      const float* Sp = U + ringSlot(s + 1, kUSlices) * uSlice;
      float* wx = WX + ringSlot(s, kXYSlices) * 3 * wxPlane;
      float* wy = WY + ringSlot(s, kXYSlices) * 3 * wyPlane;
      float* wz = WZ + ringSlot(s, kZSlices) * 3 * wzPlane;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bx * by), [&](const int i) {
        const int qy = i / bx;
        const int qx = i - qy * bx;
        const int px = qx - 1, py = qy - 1;  // tile coordinates, -1 .. tx / ty
        const bool inX = px >= 0 && px < tx, inY = py >= 0 && py < ty;
        if (!inX && !inY) return;
        const int gx = x0 + px, gy = y0 + py;
        if (gx < 0 || gx >= e.nx || gy < 0 || gy >= e.ny) return;
        float w[9];
        const float J = stressScratch(Sm, S0, Sp, (py + 2) * ax + (px + 2), ax, axy, w);
        if (inY)
          for (int c = 0; c < 3; ++c) wx[c * wxPlane + py * bx + qx] = w[3 * c + 0];
        if (inX)
          for (int c = 0; c < 3; ++c) wy[c * wyPlane + qy * tx + px] = w[3 * c + 1];
        if (inX && inY) {
          for (int c = 0; c < 3; ++c) wz[c * wzPlane + py * tx + px] = w[3 * c + 2];
          if (own) energyAddJacobian(acc, J);
        }
      });
    };

    // f at slice z (W of slices z - 1, z, z + 1 ready).
    auto assemble = [&](int z) {
      const float* wx = WX + ringSlot(z, kXYSlices) * 3 * wxPlane;
      const float* wy = WY + ringSlot(z, kXYSlices) * 3 * wyPlane;
      const float* wzm = WZ + ringSlot(z - 1, kZSlices) * 3 * wzPlane;
      const float* wz0 = WZ + ringSlot(z, kZSlices) * 3 * wzPlane;
      const float* wzp = WZ + ringSlot(z + 1, kZSlices) * 3 * wzPlane;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tx * ty), [&](const int i) {
        const int ly = i / tx;
        const int lx = i - ly * tx;
        const int x = x0 + lx, y = y0 + ly;
        if (x >= e.nx || y >= e.ny) return;
        const bool xm = x > 0, xp = x<e.nx - 1, ym = y> 0, yp = y < e.ny - 1;
        const bool zm = z > 0, zp = z < e.nz - 1;
        float fr[3];
        for (int c = 0; c < 3; ++c) {
          const float* a = wx + c * wxPlane + ly * bx + lx;  // x - 1, x, x + 1 at a[0..2]
          const float* b = wy + c * wyPlane + ly * tx + lx;  // y - 1, y, y + 1 at b[0, tx, 2tx]
          const int k = c * wzPlane + ly * tx + lx;
          fr[c] = adjointCentral(xm ? a[0] : 0.0f, a[1], xp ? a[2] : 0.0f, x, e.nx);
          fr[c] += adjointCentral(ym ? b[0] : 0.0f, b[tx], yp ? b[2 * tx] : 0.0f, y, e.ny);
          fr[c] += adjointCentral(zm ? wzm[k] : 0.0f, wz0[k], zp ? wzp[k] : 0.0f, z, e.nz);
        }
        float fd[3];
        dataTerm(v.moving, v.fixed, x, y, z, v.u(0, z, y, x), v.u(1, z, y, x), v.u(2, z, y, x), acc,
                 fd);
        for (int c = 0; c < 3; ++c) v.f(c, z, y, x) = fd[c] + lambda * fr[c];
      });
    };

    load(zB - 2);
    load(zB - 1);
    for (int s = zB - 1; s <= zE; ++s) {
      // Slot of u(s + 1) held u(s - 2), last read by computeW(s - 1) before the previous
      // step's second barrier.
      if (s < e.nz) load(s + 1);
      team.team_barrier();
      // WX/WY slot of s held slice s - 2 and the WZ slot slice s - 3, last read by
      // assemble(s - 2) in the previous step, which ended before the barrier above.
      if (s >= 0 && s < e.nz) computeW(s, s >= zB && s < zE);
      team.team_barrier();
      if (s - 1 >= zB) assemble(s - 1);
    }
  }
};

// Default tile: 32 x 8 (a warp per tile row), shrunk in y to fit the level-0 scratch:
//   32x8: 3x3x36x12 + 2x3x(34x8 + 32x10) + 3x3x32x8 = 9744 floats = 38,976 B: fits CUDA
//         (Kokkos 4.6: ~40,936 B), not Kokkos 3.4 Serial (32,768 B), which gets 32x6 (30,912 B).
// Not yet measured against other shapes on a GPU.
inline constexpr ForceTile kReusePreferredTile{32, 8, 0};

template <class Exec>
struct ForceKernel<RegistrationVariant::Reuse, Exec> {
  using Mem = typename Exec::memory_space;
  static constexpr bool kFusesUpdate = false;  // computeForce runs a pending update first
  using Functor = ReuseForceFunctor<Exec>;

  static ForceLaunchInfo info(Exec const& exec, Extents const& e, ForceTile const& requested) {
    return teamLaunchInfo<Functor>(exec, e, RegistrationVariant::Reuse, requested,
                                   kReusePreferredTile);
  }

  static EnergySums launch(Exec const& exec, ForceViews<Mem> const& views, Extents const& e,
                           float lambda, ForceLaunchInfo const& info) {
    return launchTeams<Functor>(exec, views, e, lambda, info, "kortex::Registration::Reuse::force");
  }
};

}  // namespace kortex::gpu::registration_detail
