// NLM variant ScratchTiled: TeamPolicy (Kokkos::AUTO team size), one team per output tile.
//
// Apron mode (the normal case): the team loads the apron, tile + 2(R + r) voxels along every
// filtered axis, cooperatively into level-0 scratch, applying the clamp rule during the load
// (so scratch holds I(clamp(p)) for every unclamped position p the tile can touch), then
// team_barrier(); every patch distance and weighted sample is then read from scratch.
// The work loop is a TeamThreadRange over the tile's voxels (x fastest), so any team size,
// including Kokkos 3.4 Serial's 1, covers the whole tile.
//
// The tile is sized from scratchBytes() against TeamPolicy::scratch_size_max(0): it starts at
// the preferred shape and halves its longest axis (z first, then y, then x) until it fits.
// 3D aprons grow fast ((1 + 2(R + r))^3 floats even for a 1-voxel tile); when even a 1-voxel
// tile does not fit, the kernel switches to CentreOnly mode: scratch holds only the patch-centre
// region (tile + 2r per axis, clamped at load) and the shifted patches and weighted samples are
// read from global memory through the read-only cache. When even a 1-voxel centre region does
// not fit (a 3D patch radius above ~10 on CUDA, ~9 on Serial) the variant throws Unsupported:
// Naive and BoxSum handle those radii.
#pragma once

#include <Kokkos_Core.hpp>

#include <array>
#include <string>

#include "gpu/nlm/detail/NlmCommon.hpp"

namespace kortex::gpu::nlm_detail {

enum class TiledMode { Apron, CentreOnly };

struct TiledConfig {
  TiledMode mode = TiledMode::Apron;
  std::array<int, 3> tile{1, 1, 1};  // (x, y, z) outputs per team
  std::array<int, 3> apron{1, 1, 1};
  std::array<int, 3> halo{0, 0, 0};  // apron offset from the tile origin along each axis
};

// Scratch footprint of a tile: the apron (tile + 2*halo per filtered axis) in floats.
template <class ExecSpace>
std::size_t scratchBytes(std::array<int, 3> const& tile, std::array<int, 3> const& halo) {
  const std::size_t n = static_cast<std::size_t>(tile[0] + 2 * halo[0]) *
                        static_cast<std::size_t>(tile[1] + 2 * halo[1]) *
                        static_cast<std::size_t>(tile[2] + 2 * halo[2]);
  return scratchFloatBytes<ExecSpace>(n);
}

// Tile for the given halo that fits `maxBytes`, starting from `preferred`; false if even a
// 1-voxel tile does not fit.
template <class ExecSpace>
bool fitTile(std::array<int, 3> preferred, std::array<int, 3> const& halo, std::size_t maxBytes,
             std::array<int, 3>& tile) {
  tile = preferred;
  while (scratchBytes<ExecSpace>(tile, halo) > maxBytes) {
    int a = 2;  // longest axis, ties broken z, y, x
    for (int b : {1, 0})
      if (tile[b] > tile[a]) a = b;
    if (tile[a] == 1) return false;
    tile[a] = (tile[a] + 1) / 2;
  }
  return true;
}

// Fewest outputs per team for which Apron mode is used: the work loop gives one output to each
// thread, so a smaller tile leaves most of a warp idle. Measured on H200 (64^3, r = 2, R = 8):
// the apron fits only a 1-voxel tile there and took 2451 ms, Naive 205 ms.
inline constexpr int kMinApronTileOutputs = 32;

// Starting tile without a tuning entry. 2D: 32x16 = 512 outputs per team (a 17x17 search with
// 7x7 patches needs an 8 KiB apron). 3D: 8^3, shrunk to 8x8x4 for R=5, r=2 on CUDA (35 KiB apron).
inline std::array<int, 3> defaultTiledTile(int dim) {
  return dim == 2 ? std::array<int, 3>{32, 16, 1} : std::array<int, 3>{8, 8, 8};
}

// `requested` (all > 0: e.g. the tuning database's "ct.nlm.scratch" entry) replaces the default
// starting tile; fitTile shrinks either to the scratch limit.
template <class ExecSpace>
TiledConfig chooseTiledConfig(Problem const& pb, std::size_t maxBytes, std::array<int, 3> requested = {0, 0, 0}) {
  TiledConfig c;
  const std::array<int, 3> preferred =
      requested[0] > 0 && requested[1] > 0 && requested[2] > 0 ? requested : defaultTiledTile(pb.dim);
  c.halo = {pb.R + pb.r, pb.R + pb.r, pb.Rz + pb.rz};
  const bool apronFits = fitTile<ExecSpace>(preferred, c.halo, maxBytes, c.tile);
  // An apron tile smaller than a warp is slower than no apron at all (kMinApronTileOutputs).
  const int outputs = c.tile[0] * c.tile[1] * c.tile[2];
  const bool apronUseful = apronFits && outputs >= kMinApronTileOutputs;
  if (!apronUseful) {
    const std::array<int, 3> apronTile = c.tile;
    const std::array<int, 3> apronHalo = c.halo;
    c.mode = TiledMode::CentreOnly;
    c.halo = {pb.r, pb.r, pb.rz};
    if (!fitTile<ExecSpace>(preferred, c.halo, maxBytes, c.tile)) {
      if (apronFits) {  // (unreachable: the centre region is smaller than the apron)
        c.mode = TiledMode::Apron;
        c.tile = apronTile;
        c.halo = apronHalo;
      } else {
        throw Unsupported("NLM ScratchTiled: a patch of radius " + std::to_string(pb.r) + " in " +
                          std::to_string(pb.dim) + "D needs " +
                          std::to_string(scratchBytes<ExecSpace>({1, 1, 1}, c.halo)) +
                          " bytes of team scratch even for a 1-voxel tile, more than the " +
                          std::to_string(maxBytes) +
                          " this backend offers; use the naive or boxsum variant");
      }
    }
  }
  for (int a = 0; a < 3; ++a) c.apron[a] = c.tile[a] + 2 * c.halo[a];
  return c;
}

template <int Dim, TiledMode Mode, class ExecSpace>
struct ScratchTiledKernel {
  using memory_space = typename ExecSpace::memory_space;
  using policy_type = Kokkos::TeamPolicy<ExecSpace>;
  using member_type = typename policy_type::member_type;
  using scratch_view = Kokkos::View<float*, typename ExecSpace::scratch_memory_space,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  InputView<memory_space> in;
  ImageView<memory_space> out;
  Problem pb;
  int tx, ty, tz;        // tile
  int ax, ay, az;        // apron extents
  int hx, hy, hz;        // apron origin = tile origin - halo
  int tilesX, tilesY;

  KOKKOS_INLINE_FUNCTION std::size_t apronSize() const {
    return static_cast<std::size_t>(ax) * static_cast<std::size_t>(ay) * static_cast<std::size_t>(az);
  }

  KOKKOS_FUNCTION void operator()(member_type const& team) const {
    scratch_view apron(team.team_scratch(0), apronSize());
    float* A = apron.data();

    int t = team.league_rank();
    const int x0 = (t % tilesX) * tx;
    t /= tilesX;
    const int y0 = (t % tilesY) * ty;
    const int z0 = (t / tilesY) * tz;
    const int axy = ax * ay;

    // Cooperative load with the clamp rule applied here, once per sample.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, ax * ay * az), [&](const int i) {
      const int ix = i % ax;
      const int iy = (i / ax) % ay;
      const int iz = i / axy;
      A[i] = in(clampIndex(z0 - hz + iz, pb.nz), clampIndex(y0 - hy + iy, pb.ny),
                clampIndex(x0 - hx + ix, pb.nx));
    });
    team.team_barrier();

    const int r = pb.r, R = pb.R;
    const int rz = Dim == 3 ? r : 0, Rz = Dim == 3 ? R : 0;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tx * ty * tz), [&](const int i) {
      const int lx = i % tx, ly = (i / tx) % ty, lz = i / (tx * ty);
      const int x = x0 + lx, y = y0 + ly, z = z0 + lz;
      if (x >= pb.nx || y >= pb.ny || z >= pb.nz) return;
      // Index of the voxel itself in the apron.
      const int base = (lz + hz) * axy + (ly + hy) * ax + (lx + hx);
      // Centred sums, float per row of offsets, double across rows (detail/NlmCommon.hpp).
      const float centre = A[base];
      double totW = 0.0, totWI = 0.0;
      for (int oz = -Rz; oz <= Rz; ++oz)
        for (int oy = -R; oy <= R; ++oy) {
          float rowW = 0.0f, rowWI = 0.0f;
          for (int ox = -R; ox <= R; ++ox) {
            const bool isCentre = ox == 0 && oy == 0 && oz == 0;
            float w = 1.0f;  // centre weight, set explicitly
            float v;
            if constexpr (Mode == TiledMode::Apron) {
              const int off = oz * axy + oy * ax + ox;
              if (!isCentre) {
                float d = 0.0f;
                for (int pz = -rz; pz <= rz; ++pz)
                  for (int py = -r; py <= r; ++py) {
                    const float* c = A + base + pz * axy + py * ax;
                    const float* s = c + off;
                    for (int px = -r; px <= r; ++px) d += squaredDifference(c[px], s[px]);
                  }
                w = nlmWeight(d, pb.log2Coefficient);
              }
              v = A[base + off];
            } else {
              if (!isCentre) {
                float d = 0.0f;
                for (int pz = -rz; pz <= rz; ++pz) {
                  const int sz = clampIndex(z + oz + pz, pb.nz);
                  for (int py = -r; py <= r; ++py) {
                    const int sy = clampIndex(y + oy + py, pb.ny);
                    const float* c = A + base + pz * axy + py * ax;
                    for (int px = -r; px <= r; ++px)
                      d += squaredDifference(c[px], in(sz, sy, clampIndex(x + ox + px, pb.nx)));
                  }
                }
                w = nlmWeight(d, pb.log2Coefficient);
              }
              v = in(clampIndex(z + oz, pb.nz), clampIndex(y + oy, pb.ny), clampIndex(x + ox, pb.nx));
            }
            rowW += w;
            rowWI += w * (v - centre);
          }
          totW += rowW;
          totWI += rowWI;
        }
      out(z, y, x) = nlmNormalise(centre, totW, totWI);
    });
  }
};

template <int Dim, TiledMode Mode, class ExecSpace>
void launchScratchTiledMode(ExecSpace const& exec, InputView<typename ExecSpace::memory_space> in,
                            ImageView<typename ExecSpace::memory_space> out, Problem const& pb,
                            TiledConfig const& c) {
  ScratchTiledKernel<Dim, Mode, ExecSpace> k{in,          out,         pb,          c.tile[0],
                                             c.tile[1],   c.tile[2],   c.apron[0],  c.apron[1],
                                             c.apron[2],  c.halo[0],   c.halo[1],   c.halo[2],
                                             ceilDiv(pb.nx, c.tile[0]), ceilDiv(pb.ny, c.tile[1])};
  const int league = k.tilesX * k.tilesY * ceilDiv(pb.nz, c.tile[2]);
  auto policy = Kokkos::TeamPolicy<ExecSpace>(exec, league, Kokkos::AUTO)
                    .set_scratch_size(0, Kokkos::PerTeam(scratchFloatBytes<ExecSpace>(k.apronSize())));
  Kokkos::parallel_for("kortex::Nlm::ScratchTiled", policy, k);
}

template <int Dim, class ExecSpace>
TiledConfig launchScratchTiled(ExecSpace const& exec, InputView<typename ExecSpace::memory_space> in,
                               ImageView<typename ExecSpace::memory_space> out, Problem const& pb,
                               std::array<int, 3> requested = {0, 0, 0}) {
  const std::size_t maxBytes = kx::scratchSizeMax<Kokkos::TeamPolicy<ExecSpace>>(0);
  const TiledConfig c = chooseTiledConfig<ExecSpace>(pb, maxBytes, requested);
  if (c.mode == TiledMode::Apron)
    launchScratchTiledMode<Dim, TiledMode::Apron>(exec, in, out, pb, c);
  else
    launchScratchTiledMode<Dim, TiledMode::CentreOnly>(exec, in, out, pb, c);
  return c;
}

}  // namespace kortex::gpu::nlm_detail
