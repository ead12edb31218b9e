// Kernels of greedy registration (specification: core/Greedy.hpp), one functor per pass.
#pragma once

#include <Kokkos_Core.hpp>

#include <string>

#include "core/Boundary.hpp"
#include "core/Errors.hpp"
#include "core/Compat.hpp"
#include "core/Greedy.hpp"
#include "core/Registration.hpp"
#include "gpu/Fields.hpp"
#include "gpu/detail/Common.hpp"

namespace kortex::gpu::greedy_detail {

using ::kortex::deformationDeterminant;

// F = -(W - I1) grad W.
template <class Mem>
struct ForceFunctor {
  ConstImageView<Mem> w, fixed;
  Field<Mem> f;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    float o[3];
    ::kortex::greedyForce(w, fixed, z, y, x, o);
    f(0, z, y, x) = o[0];
    f(1, z, y, x) = o[1];
    f(2, z, y, x) = o[2];
  }
};

// out = u(x + eps v) - eps v.
template <class Mem>
struct ComposeFunctor {
  ConstField<Mem> u, v;
  Field<Mem> out;
  float eps;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    float o[3];
    ::kortex::greedyCompose(u, v, eps, z, y, x, o);
    out(0, z, y, x) = o[0];
    out(1, z, y, x) = o[1];
    out(2, z, y, x) = o[2];
  }
};

// min over voxels of det(I - grad u) (clamped central differences).
template <class Mem>
struct MinJacobianFunctor {
  using value_type = float;
  ConstField<Mem> u;
  int ny, nx, nz;
  KOKKOS_INLINE_FUNCTION void operator()(int i, float& m) const {
    const int row = i / nx, x = i - row * nx, y = row % ny, z = row / ny;
    const float J = deformationDeterminant(u, z, y, x, nz, ny, nx);
    if (J < m) m = J;
  }
  KOKKOS_INLINE_FUNCTION void init(float& m) const { m = 3.4e38f; }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE float& d, const KORTEX_JOIN_VOLATILE float& s) const {
    if (s < d) d = s;
  }
};

// Scale-f image: trilinear sample of `blurred` at f x + (f - 1)/2.
template <class Mem>
struct DownsampleFunctor {
  ConstImageView<Mem> blurred;
  ImageView<Mem> out;
  float factor, shift;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    float g[3];
    out(z, y, x) = regSampleTrilinear(blurred, factor * x + shift, factor * y + shift, factor * z + shift, g);
  }
};

// out(x) = scale * in(a x + b) per component.
template <class Mem>
struct UpsampleFunctor {
  ConstField<Mem> in;
  Field<Mem> out;
  float a, b, scale;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    float o[3];
    greedySampleField(in, a * x + b, a * y + b, a * z + b, o);
    out(0, z, y, x) = scale * o[0];
    out(1, z, y, x) = scale * o[1];
    out(2, z, y, x) = scale * o[2];
  }
};

// ---- the registration's fused passes --------------------------------------------------------------

// max |v|^2 (reduced into a device scalar: no host synchronisation).
template <class Mem>
struct MaxNorm2Functor {
  using value_type = float;
  const float* v;
  int n;
  KOKKOS_INLINE_FUNCTION void operator()(int i, float& m) const {
    const float a = v[i], b = v[n + i], c = v[2 * n + i];
    const float s = a * a + b * b + c * c;
    if (s > m) m = s;
  }
  KOKKOS_INLINE_FUNCTION void init(float& m) const { m = 0.0f; }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE float& d, const KORTEX_JOIN_VOLATILE float& s) const {
    if (s > d) d = s;
  }
};

// out = u(x + eps v) - eps v with eps = delta / max |v| read from the device scalar (0 when v = 0).
template <class Mem>
struct ComposeScaledFunctor {
  ConstField<Mem> u, v;
  Field<Mem> out;
  Kokkos::View<const float, Mem> vmax2;
  float delta;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    const float eps = greedyEps(delta, vmax2());
    float o[3];
    ::kortex::greedyCompose(u, v, eps, z, y, x, o);
    out(0, z, y, x) = o[0];
    out(1, z, y, x) = o[1];
    out(2, z, y, x) = o[2];
  }
};

// The candidate's fold check: min det(I - grad u) (clamped central differences) and the step's
// max |v|^2 copied from the device scalar, so that one read-back serves both (the atlas's step).
using CheckSums = GreedyTrialSums;
template <class Mem>
struct FoldCheckFunctor {
  using value_type = CheckSums;
  ConstField<Mem> u;
  Kokkos::View<const float, Mem> vmax2;
  int nz, ny, nx;
  KOKKOS_INLINE_FUNCTION void operator()(int i, value_type& s) const {
    const int row = i / nx, x = i - row * nx, y = row % ny, z = row / ny;
    if (i == 0) s.vmax2 = vmax2();
    const float J = deformationDeterminant(u, z, y, x, nz, ny, nx);
    if (J < s.minJ) s.minJ = J;
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& s) const {
    s.sse = 0.0;
    s.minJ = 3.4e38f;
    s.vmax2 = 0.0f;
  }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type& d, const KORTEX_JOIN_VOLATILE value_type& s) const {
    d.sse += s.sse;
    if (s.minJ < d.minJ) d.minJ = s.minJ;
    if (s.vmax2 > d.vmax2) d.vmax2 = s.vmax2;
  }
};

// The registration's candidate checks in one pass: the fold check, and W(x) = I0(x - u(x)) written
// to `warped` with its sum (W - I1)^2.
template <class Mem>
struct CheckFunctor {
  using value_type = CheckSums;
  FoldCheckFunctor<Mem> fold;
  ConstImageView<Mem> moving, fixed;
  ImageView<Mem> warped;
  KOKKOS_INLINE_FUNCTION void operator()(int i, value_type& s) const {
    ConstField<Mem> const& u = fold.u;
    const int row = i / fold.nx, x = i - row * fold.nx, y = row % fold.ny, z = row / fold.ny;
    float g[3];
    const float w = regSampleTrilinear(moving, static_cast<float>(x) - u(0, z, y, x), static_cast<float>(y) - u(1, z, y, x),
                                       static_cast<float>(z) - u(2, z, y, x), g);
    warped(z, y, x) = w;
    const double d = double(w) - double(fixed(z, y, x));
    s.sse += d * d;
    fold(i, s);
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& s) const { fold.init(s); }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type& d, const KORTEX_JOIN_VOLATILE value_type& s) const {
    fold.join(d, s);
  }
};

// The whole candidate step in one launch (GreedyStepVariant::ScratchTiled): composition, warp,
// fold check, SSE and the force at the candidate, from u, v, I0 and I1 only. A team owns an xy
// tile and marches along z through a chunk of slices; for every slice it composes u' and warps
// W = I0(x - u'(x)) on the tile + 1-voxel apron (clamped indices, so the apron holds the values the
// clamp rule reads) into a ring of three slices in team scratch, then computes det(I - grad u') and
// F = -(W - I1) grad W on the previous slice from the ring. u' and W are computed once per point
// (the apron's by both neighbouring tiles, with the same operations), so this writes what the
// Naive sequence (compose; warp + check; force) writes, without the three round trips of u', W.
template <class Exec>
struct StepTiledFunctor {
  using Mem = typename Exec::memory_space;
  using Team = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Scratch = Kokkos::View<float*, typename Exec::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  using value_type = CheckSums;
  // 32 x 8 tiles (+ apron: 34 x 10 points), 4 floats per point (u' and W), 3 slices: 16.3 KB of
  // scratch (under the 32 KB of Kokkos 3.4 Serial and the ~40 KB of CUDA); 32-wide rows coalesce.
  static constexpr int kTileX = 32, kTileY = 8, kPitchX = kTileX + 2, kPitchY = kTileY + 2;
  static constexpr int kSlotFloats = 4 * kPitchX * kPitchY;

  ConstField<Mem> u, v;
  ConstImageView<Mem> moving, fixed;
  Field<Mem> cand, force;
  Kokkos::View<const float, Mem> vmax2;
  float delta;
  int tilesX, tilesY, chunkZ;

  static std::size_t scratchBytes() { return Scratch::shmem_size(3 * kSlotFloats); }

  KOKKOS_INLINE_FUNCTION void operator()(Team const& team, value_type& s) const {
    const int nz = static_cast<int>(u.extent(1)), ny = static_cast<int>(u.extent(2)), nx = static_cast<int>(u.extent(3));
    const int tile = team.league_rank() % (tilesX * tilesY), chunk = team.league_rank() / (tilesX * tilesY);
    const int x0 = (tile % tilesX) * kTileX, y0 = (tile / tilesX) * kTileY;
    const int z0 = chunk * chunkZ, z1 = z0 + chunkZ < nz ? z0 + chunkZ : nz;
    const int w = nx - x0 < kTileX ? nx - x0 : kTileX, h = ny - y0 < kTileY ? ny - y0 : kTileY;
    const int lw = w + 2, lh = h + 2;
    const float m2 = vmax2();
    const float eps = greedyEps(delta, m2);
    if (team.league_rank() == 0) s.vmax2 = m2;
    Scratch ring(team.team_scratch(0), 3 * kSlotFloats);
    // Point (ly, lx) of slot k: u'_x, u'_y, u'_z, W.
    auto at = [&](int k, int q, int ly, int lx) -> float& {
      return ring(((k + 3) % 3) * kSlotFloats + (q * kPitchY + ly) * kPitchX + lx);
    };
    auto compute = [&](int k) {
      const int gz = clampIndex(k, nz);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lw * lh), [&](int i) {
        const int ly = i / lw, lx = i - ly * lw;
        const int gy = clampIndex(y0 + ly - 1, ny), gx = clampIndex(x0 + lx - 1, nx);
        float o[3], g[3];
        ::kortex::greedyCompose(u, v, eps, gz, gy, gx, o);
        at(k, 0, ly, lx) = o[0];
        at(k, 1, ly, lx) = o[1];
        at(k, 2, ly, lx) = o[2];
        at(k, 3, ly, lx) = regSampleTrilinear(moving, static_cast<float>(gx) - o[0], static_cast<float>(gy) - o[1],
                                              static_cast<float>(gz) - o[2], g);
      });
    };
    compute(z0 - 1);
    compute(z0);
    for (int k = z0; k < z1; ++k) {
      compute(k + 1);
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w * h), [&](int i) {
        const int ty = i / w, tx = i - ty * w;
        const int ly = ty + 1, lx = tx + 1, gy = y0 + ty, gx = x0 + tx;
        float g[9];
        for (int c = 0; c < 3; ++c) {
          g[3 * c + 0] = regCentral(at(k, c, ly, lx - 1), at(k, c, ly, lx + 1));
          g[3 * c + 1] = regCentral(at(k, c, ly - 1, lx), at(k, c, ly + 1, lx));
          g[3 * c + 2] = regCentral(at(k - 1, c, ly, lx), at(k + 1, c, ly, lx));
        }
        const float J = regDeterminant(g);
        if (J < s.minJ) s.minJ = J;
        const float wc = at(k, 3, ly, lx), f1 = fixed(k, gy, gx);
        const double d = double(wc) - double(f1);
        s.sse += d * d;
        float f[3];
        ::kortex::greedyForceAt(wc, f1, at(k, 3, ly, lx - 1), at(k, 3, ly, lx + 1), at(k, 3, ly - 1, lx),
                                at(k, 3, ly + 1, lx), at(k - 1, 3, ly, lx), at(k + 1, 3, ly, lx), f);
        for (int c = 0; c < 3; ++c) {
          cand(c, k, gy, gx) = at(k, c, ly, lx);
          force(c, k, gy, gx) = f[c];
        }
      });
      team.team_barrier();  // slot k - 1 is overwritten by compute(k + 2)
    }
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& s) const {
    s.sse = 0.0;
    s.minJ = 3.4e38f;
    s.vmax2 = 0.0f;
  }
  KOKKOS_INLINE_FUNCTION void join(KORTEX_JOIN_VOLATILE value_type& d, const KORTEX_JOIN_VOLATILE value_type& s) const {
    d.sse += s.sse;
    if (s.minJ < d.minJ) d.minJ = s.minJ;
    if (s.vmax2 > d.vmax2) d.vmax2 = s.vmax2;
  }
};

// The one-pass step's schedule: slices per team (league size and apron overhead; 0: chosen by
// stepTiledChunk) and team size (0: Kokkos::AUTO).
struct StepTiledLaunch {
  int chunkZ = 0;
  int teamSize = 0;
};

// Slices per team when the launch leaves it open: as many z chunks as fill the device's resident
// teams once. A team is one xy tile's march along z, one slice after another, so too few teams
// leave SMs idle (small grids) and more than fit run in two waves (large ones). Resident: about
// 1024 threads per SM in 128-thread teams (56-64 registers per thread: 8-9 teams per H100/H200
// SM). Measured on an H200 at 160x192x144 (120 tiles): 16 slices (1080 teams, two waves at 64
// registers) 0.29 ms, 24 slices (720 teams) 0.24 ms (bench/results/greedy_iteration_nvidia-h200.md).
// Host back ends (concurrency = threads): one chunk per tile, the fewest recomputed apron slices.
inline int stepTiledChunk(int concurrency, int tiles, int nz) {
  const int resident = concurrency / 256;
  const int chunks = resident > tiles ? (resident / tiles < nz ? resident / tiles : nz) : 1;
  return (nz + chunks - 1) / chunks;
}

// Launch of the one-pass step: league of xy tiles x z chunks, scratch checked against what the back
// end offers. The sums go to `sums`: a host CheckSums (fences) or a device View of one (enqueued).
template <class Exec, class Sums>
void stepTiledInto(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                   ConstImageView<typename Exec::memory_space> fixed, ConstField<typename Exec::memory_space> u,
                   ConstField<typename Exec::memory_space> v, Kokkos::View<const float, typename Exec::memory_space> vmax2,
                   float delta, Field<typename Exec::memory_space> uOut, Field<typename Exec::memory_space> force,
                   Sums&& sums, StepTiledLaunch cfg = {}) {
  using F = StepTiledFunctor<Exec>;
  using Policy = Kokkos::TeamPolicy<Exec>;
  const int nz = int(u.extent(1)), ny = int(u.extent(2)), nx = int(u.extent(3));
  const int tilesX = (nx + F::kTileX - 1) / F::kTileX, tilesY = (ny + F::kTileY - 1) / F::kTileY;
  const int chunk = cfg.chunkZ > 0 ? cfg.chunkZ : stepTiledChunk(kx::concurrency(exec), tilesX * tilesY, nz);
  const int teams = tilesX * tilesY * ((nz + chunk - 1) / chunk);
  const std::size_t bytes = F::scratchBytes();
  Policy policy = cfg.teamSize > 0 ? Policy(exec, teams, cfg.teamSize) : Policy(exec, teams, Kokkos::AUTO);
  const std::size_t maxBytes = policy.scratch_size_max(0);
  if (bytes > maxBytes)
    throw InvalidArgument("greedy step: its tile needs " + std::to_string(bytes) + " B of team scratch, the back end offers " +
                          std::to_string(maxBytes) + " B");
  // lightWeight: the closure crosses 512 B (gpu/detail/Common.hpp)
  Kokkos::parallel_reduce("kortex::greedy::step_tiled", lightWeight(policy.set_scratch_size(0, Kokkos::PerTeam(bytes))),
                          F{u, v, moving, fixed, uOut, force, vmax2, delta, tilesX, tilesY, chunk}, sums);
}

// The same, returning the sums (fences).
template <class Exec>
CheckSums stepTiled(Exec const& exec, ConstImageView<typename Exec::memory_space> moving,
                    ConstImageView<typename Exec::memory_space> fixed, ConstField<typename Exec::memory_space> u,
                    ConstField<typename Exec::memory_space> v, Kokkos::View<const float, typename Exec::memory_space> vmax2,
                    float delta, Field<typename Exec::memory_space> uOut, Field<typename Exec::memory_space> force,
                    StepTiledLaunch cfg = {}) {
  CheckSums cs{0.0, 0.0f, 0.0f};
  stepTiledInto(exec, moving, fixed, u, v, vmax2, delta, uOut, force, cs, cfg);
  return cs;
}

}  // namespace kortex::gpu::greedy_detail
