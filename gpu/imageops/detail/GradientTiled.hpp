// ScratchTiled gradient (core/ImageOps.hpp): a team owns an xy tile and marches along z with a
// ring of 3 slices of the tile + 1-voxel apron in team scratch (clamp applied while loading), so
// every input value is read from global memory once per tile (plus the apron). A team handles
// kChunkZ slices of its tile.
#pragma once

#include <Kokkos_Core.hpp>

#include "core/Boundary.hpp"
#include "core/Image.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu::imageops_detail {

template <class Exec>
struct GradientTiledFunctor {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Scratch = Kokkos::View<float*, typename Exec::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  // 32 x 8 tiles: coalesced 32-wide rows; 34 x 10 x 3 slices x 4 B = 4 KB of scratch.
  static constexpr int kTileX = 32, kTileY = 8, kPitchX = kTileX + 2, kPitchY = kTileY + 2;
  static constexpr int kSlice = kPitchX * kPitchY;

  static constexpr int kChunkZ = 16;  // slices per team (league = tiles x chunks)

  ConstImageView<Mem> a;
  Field<Mem> out;
  int tilesX, tilesY;

  static std::size_t scratchBytes() { return Scratch::shmem_size(3 * kSlice); }

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team) const {
    const int nz = static_cast<int>(a.extent(0)), ny = static_cast<int>(a.extent(1)), nx = static_cast<int>(a.extent(2));
    const int tile = team.league_rank() % (tilesX * tilesY), chunk = team.league_rank() / (tilesX * tilesY);
    const int z0 = chunk * kChunkZ, z1 = z0 + kChunkZ < nz ? z0 + kChunkZ : nz;
    const int x0 = (tile % tilesX) * kTileX, y0 = (tile / tilesX) * kTileY;
    const int w = nx - x0 < kTileX ? nx - x0 : kTileX, h = ny - y0 < kTileY ? ny - y0 : kTileY;
    const int lw = w + 2, lh = h + 2;
    Scratch ring(team.team_scratch(0), 3 * kSlice);
    auto load = [&](int z) {  // slice z (clamped) into slot z mod 3 (z >= -1)
      const int zs = clampIndex(z, nz), slot = (z + 3) % 3;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lw * lh), [&](int i) {
        const int ly = i / lw, lx = i % lw;
        ring(slot * kSlice + ly * kPitchX + lx) = a(zs, clampIndex(y0 + ly - 1, ny), clampIndex(x0 + lx - 1, nx));
      });
    };
    load(z0 - 1);
    load(z0);
    for (int z = z0; z < z1; ++z) {
      load(z + 1);
      team.team_barrier();
      const int sm = (z - 1 + 3) % 3, s0 = z % 3, sp = (z + 1) % 3;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w * h), [&](int i) {
        const int ly = i / w + 1, lx = i % w + 1;
        const int c = ly * kPitchX + lx;
        out(0, z, y0 + ly - 1, x0 + lx - 1) = 0.5f * (ring(s0 * kSlice + c + 1) - ring(s0 * kSlice + c - 1));
        out(1, z, y0 + ly - 1, x0 + lx - 1) = 0.5f * (ring(s0 * kSlice + c + kPitchX) - ring(s0 * kSlice + c - kPitchX));
        out(2, z, y0 + ly - 1, x0 + lx - 1) = 0.5f * (ring(sp * kSlice + c) - ring(sm * kSlice + c));
      });
      team.team_barrier();
    }
  }
};

}  // namespace kortex::gpu::imageops_detail
