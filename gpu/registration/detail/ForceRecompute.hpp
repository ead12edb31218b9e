// Force variant Recompute (the paper's "recompute-registers"): TeamPolicy, one team per xy tile
// of tx * ty voxels and z chunk, marching through the chunk one slice at a time.
//
// Scratch (level 0): a ring of 5 u slices (3 components each) on the tile + a 2-voxel apron in
// x and y, (tx + 4)(ty + 4) floats per component, loaded with the clamp rule applied (slot of
// slice zz holds u(c(zz)), apron voxels u(c(.)), so every central difference read from scratch
// is the clamped one of the spec). Per step z the team loads only the newest slice z + 2
// (cooperatively, TeamThreadRange over the flat slice, x fastest: coalesced), team_barrier(),
// then every voxel of the tile computes G, J and W at itself and at its in-range neighbours
// y +- e_j from scratch (7 stress evaluations, none shared), assembles f_reg with adjointCentral,
// adds the data term (moving image sampled from global memory) and writes f; a second barrier
// keeps the next load from overwriting slice z - 3's slot, which this step still reads
// (slot (z + 3) mod 5 == (z - 2) mod 5 is slice z - 2, read for W at z - 1).
// Chunk prologue: slices z0 - 2 .. z0 + 1 (4 extra loads per chunk).
// With ForceViews::rate set it evaluates the force at the candidate u + dt * rate, formed while loading the
// slices, and writes the candidate of its tile's own voxels to uOut: the iteration's update without a pass
// of its own (kFusesUpdate).
#pragma once

#include <Kokkos_Core.hpp>
#include <cstddef>

#include "gpu/registration/detail/RegistrationKernels.hpp"

namespace kortex::gpu::registration_detail {

// Update: the candidate form (ForceViews::rate set), its own instantiation so that the plain force keeps
// its registers.
template <class Exec, bool Update = false>
struct RecomputeForceFunctor {
  KORTEX_REGISTRATION_ENERGY_REDUCER
  using Mem = typename Exec::memory_space;
  using member_type = typename Kokkos::TeamPolicy<Exec>::member_type;
  using scratch_view = Kokkos::View<float*, typename Exec::scratch_memory_space,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  static constexpr int kSlices = 5;
  static constexpr int kApron = 2;

  ForceViews<Mem> v;
  Extents e;
  float lambda = 0.0f;
  int tx = 1, ty = 1, chunk = 1, tilesX = 1, tilesY = 1;

  KOKKOS_INLINE_FUNCTION static std::size_t scratchFloats(int tx, int ty) {
    return static_cast<std::size_t>(kSlices) * 3 * static_cast<std::size_t>(tx + 2 * kApron) *
           static_cast<std::size_t>(ty + 2 * kApron);
  }

  KOKKOS_FUNCTION void operator()(member_type const& team, EnergySums& acc) const {
    const int ax = tx + 2 * kApron, ay = ty + 2 * kApron, axy = ax * ay, slice = 3 * axy;
    scratch_view buf(team.team_scratch(0), static_cast<std::size_t>(kSlices) * slice);
    float* U = buf.data();

    const TeamTile tile = teamTile(team.league_rank(), tx, ty, chunk, tilesX, tilesY, e.nz);
    const int x0 = tile.x0, y0 = tile.y0, zB = tile.zB, zE = tile.zE;

    // Slice zz (clamped) into its ring slot: u, or the candidate u + dt * rate (ForceViews::rate).
    auto load = [&](int zz) {
      float* const dst = U + ringSlot(zz, kSlices) * slice;
      if constexpr (Update)
        loadApronSlice(team, CandidateU<RandomField<Mem>>{v.u, v.rate, v.dt}, e, dst, zz, x0, y0, kApron, ax, ay);
      else
        loadApronSlice(team, v.u, e, dst, zz, x0, y0, kApron, ax, ay);
    };

    for (int zz = zB - 2; zz <= zB + 1; ++zz) load(zz);
    for (int z = zB; z < zE; ++z) {
      load(z + 2);
      team.team_barrier();
      const float* S[5];
      for (int k = 0; k < 5; ++k) S[k] = U + ringSlot(z - 2 + k, kSlices) * slice;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tx * ty), [&](const int i) {
        const int ly = i / tx;
        const int lx = i - ly * tx;
        const int x = x0 + lx, y = y0 + ly;
        if (x >= e.nx || y >= e.ny) return;
        const int idx = (ly + kApron) * ax + (lx + kApron);
        float wc[9], wm[9], wp[9];
        const float J = stressScratch(S[1], S[2], S[3], idx, ax, axy, wc);
        energyAddJacobian(acc, J);
        float fr[3] = {0.0f, 0.0f, 0.0f};
        for (int k = 0; k < 9; ++k) wm[k] = wp[k] = 0.0f;
        if (x > 0) stressScratch(S[1], S[2], S[3], idx - 1, ax, axy, wm);
        if (x < e.nx - 1) stressScratch(S[1], S[2], S[3], idx + 1, ax, axy, wp);
        for (int c = 0; c < 3; ++c)
          fr[c] += adjointCentral(wm[3 * c], wc[3 * c], wp[3 * c], x, e.nx);
        for (int k = 0; k < 9; ++k) wm[k] = wp[k] = 0.0f;
        if (y > 0) stressScratch(S[1], S[2], S[3], idx - ax, ax, axy, wm);
        if (y < e.ny - 1) stressScratch(S[1], S[2], S[3], idx + ax, ax, axy, wp);
        for (int c = 0; c < 3; ++c)
          fr[c] += adjointCentral(wm[3 * c + 1], wc[3 * c + 1], wp[3 * c + 1], y, e.ny);
        for (int k = 0; k < 9; ++k) wm[k] = wp[k] = 0.0f;
        if (z > 0) stressScratch(S[0], S[1], S[2], idx, ax, axy, wm);
        if (z < e.nz - 1) stressScratch(S[2], S[3], S[4], idx, ax, axy, wp);
        for (int c = 0; c < 3; ++c)
          fr[c] += adjointCentral(wm[3 * c + 2], wc[3 * c + 2], wp[3 * c + 2], z, e.nz);

        float fd[3];
        dataTerm(v.moving, v.fixed, x, y, z, S[2][idx], S[2][axy + idx], S[2][2 * axy + idx], acc,
                 fd);
        for (int c = 0; c < 3; ++c) v.f(c, z, y, x) = fd[c] + lambda * fr[c];
        if constexpr (Update)
          for (int c = 0; c < 3; ++c) v.uOut(c, z, y, x) = S[2][c * axy + idx];
      });
      team.team_barrier();
    }
  }
};

// Default tile: 32 x 8 (a warp per tile row: coalesced slice loads and conflict-free scratch
// reads along x). 5 x 3 x 36 x 12 floats = 25,920 B: fits unshrunk on every backend (32 KiB on
// Kokkos 3.4 Serial, ~40 KiB on CUDA). Not yet measured against other shapes on a GPU.
inline constexpr ForceTile kRecomputePreferredTile{32, 8, 0};

template <class Exec>
struct ForceKernel<RegistrationVariant::Recompute, Exec> {
  using Mem = typename Exec::memory_space;
  using Functor = RecomputeForceFunctor<Exec>;
  static constexpr bool kFusesUpdate = true;

  static ForceLaunchInfo info(Exec const& exec, Extents const& e, ForceTile const& requested) {
    return teamLaunchInfo<Functor>(exec, e, RegistrationVariant::Recompute, requested,
                                   kRecomputePreferredTile);
  }

  static EnergySums launch(Exec const& exec, ForceViews<Mem> const& views, Extents const& e,
                           float lambda, ForceLaunchInfo const& info) {
    if (views.updating())
      return launchTeams<RecomputeForceFunctor<Exec, true>>(exec, views, e, lambda, info,
                                                            "kortex::Registration::Recompute::force_candidate");
    return launchTeams<Functor>(exec, views, e, lambda, info, "kortex::Registration::Recompute::force");
  }
};

}  // namespace kortex::gpu::registration_detail
