// Kernels of the greedy MI force (entry: gpu/greedy/Mi.hpp; specification: core/Greedy.hpp "Metrics",
// Mi, and core/MutualInformation.hpp).
#pragma once

#include <Kokkos_Core.hpp>

#include <cmath>

#include "core/Boundary.hpp"
#include "core/Compat.hpp"
#include "core/MutualInformation.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu::mi_detail {

// Voxels per team of the histogram pass (its scratch histogram is zeroed and flushed once per team).
inline constexpr int kVoxelsPerTeam = 4096;

// H(i B + k) += round(beta3 2^kMiFixedBits) for the voxels of this team (weight 1), through a
// scratch histogram when `useScratch`.
template <class Exec>
struct HistogramFunctor {
  using Mem = typename Exec::memory_space;
  using Counts = Kokkos::View<unsigned long long*, typename Exec::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  ConstImageView<Mem> warped, fixed;
  Kokkos::View<unsigned long long*, Mem> hist;
  int bins, nx, ny;
  long voxels;
  bool useScratch;

  static std::size_t scratchBytes(int bins) { return Counts::shmem_size(std::size_t(bins) * bins); }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    const int cells = bins * bins;
    Counts local;
    if (useScratch) {
      local = Counts(team.team_scratch(0), cells);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cells), [&](const int c) { local(c) = 0; });
      team.team_barrier();
    }
    const long first = long(team.league_rank()) * kVoxelsPerTeam;
    const int count = voxels - first < kVoxelsPerTeam ? int(voxels - first) : kVoxelsPerTeam;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, count), [&](const int j) {
      const long v = first + j;
      const int x = int(v % nx), r = int(v / nx), y = r % ny, z = r / ny;
      miFixedPointCounts(double(fixed(z, y, x)), double(warped(z, y, x)), 1.0, bins, [&](int cell, unsigned long long c) {
        if (useScratch)
          Kokkos::atomic_add(&local(cell), c);
        else
          Kokkos::atomic_add(&hist(cell), c);
      });
    });
    if (!useScratch) return;
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cells), [&](const int c) {
      if (local(c) != 0) Kokkos::atomic_add(&hist(c), local(c));
    });
  }
};

// One team: the column sums of H (in order of the rows), then L(i, k) = log(H(i, k) / column k) where
// H(i, k) > 0, else 0 (p / p_m: the total cancels).
template <class Exec>
struct RatiosFunctor {
  using Mem = typename Exec::memory_space;
  using Sums = Kokkos::View<double*, typename Exec::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::View<const unsigned long long*, Mem> hist;
  Kokkos::View<double*, Mem> logRatio;
  int bins;

  static std::size_t scratchBytes(int bins) { return Sums::shmem_size(std::size_t(bins)); }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(Member const& team) const {
    Sums column(team.team_scratch(0), bins);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bins), [&](const int k) {
      unsigned long long s = 0;
      for (int i = 0; i < bins; ++i) s += hist(i * bins + k);
      column(k) = double(s);
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bins * bins), [&](const int c) {
      const unsigned long long h = hist(c);
      logRatio(c) = h == 0 ? 0.0 : kx::log(double(h) / column(c % bins));
    });
  }
};

// F = scale h grad W, scale = (B - 4) / N (the reference's arithmetic: double, rounded to float once).
template <class Mem>
struct ForceFunctor {
  ConstImageView<Mem> w, fixed;
  Kokkos::View<const double*, Mem> logRatio;
  Field<Mem> f;
  double scale;
  int bins, nz, ny, nx;
  KOKKOS_INLINE_FUNCTION void operator()(int z, int y, int x) const {
    const double dEdW = scale * miSlope(double(fixed(z, y, x)), double(w(z, y, x)), bins, logRatio);
    f(0, z, y, x) = float(dEdW * (0.5 * (double(w(z, y, clampIndex(x + 1, nx))) - w(z, y, clampIndex(x - 1, nx)))));
    f(1, z, y, x) = float(dEdW * (0.5 * (double(w(z, clampIndex(y + 1, ny), x)) - w(z, clampIndex(y - 1, ny), x))));
    f(2, z, y, x) = float(dEdW * (0.5 * (double(w(clampIndex(z + 1, nz), y, x)) - w(clampIndex(z - 1, nz), y, x))));
  }
};

}  // namespace kortex::gpu::mi_detail
