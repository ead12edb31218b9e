// Internal helpers shared by the quality studies (validation/Quality.cpp,
// validation/QualityMultires.cpp): backend dispatch with timing, slices, montage grids.
// Not installed as API; include only from validation/*.cpp (needs KORTEX_VALIDATION_HAVE_IO).
#pragma once

#include <Kokkos_Core.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/Timing.hpp"
#include "core/Backend.hpp"
#include "core/Image.hpp"
#if KORTEX_VALIDATION_HAVE_IO
#include <filesystem>

#include "io/ImageIO.hpp"
#endif

namespace kortex::validation::detail {

using Clock = std::chrono::steady_clock;

// Runs a filter on the chosen backend; returns the output and the wall time of one run.
template <class RefFilter, class KokkosFilter>
HostImage runOnBackend(HostImage const& in, Backend backend, RefFilter&& refFilter,
                    KokkosFilter&& kokkosFilter, double* ms) {
  HostImage out("kortex::validation::quality::filtered", in.geometry);
  if (backend == Backend::Cpu) {
    const auto t0 = Clock::now();
    refFilter(in.data, out.data);
    *ms = msSince(t0);
    return out;
  }
  using Exec = Kokkos::DefaultExecutionSpace;
  using Mem = Exec::memory_space;
  Exec exec;
  const auto t0 = Clock::now();
  ImageView<Mem> din("kortex::validation::quality::in", in.data.extent(0), in.data.extent(1),
                     in.data.extent(2));
  ImageView<Mem> dout("kortex::validation::quality::out", in.data.extent(0), in.data.extent(1),
                      in.data.extent(2));
  Kokkos::deep_copy(din, in.data);
  kokkosFilter(exec, ConstImageView<Mem>(din), dout);
  exec.fence();
  Kokkos::deep_copy(out.data, dout);
  *ms = msSince(t0);
  return out;
}

inline HostImage middleSlice(HostImage const& vol) {
  if (vol.dimension() == 2) return vol;
  const Index k = vol.geometry.nz() / 2;
  HostImage s("kortex::validation::quality::slice", Geometry::make2D(vol.geometry.nx(), vol.geometry.ny()));
  for (Index j = 0; j < vol.geometry.ny(); ++j)
    for (Index i = 0; i < vol.geometry.nx(); ++i) s.data(0, j, i) = vol.data(k, j, i);
  return s;
}

// Tiles (all 2D, equal size) laid out as a grid with `gap`-pixel separators of value `sep`.
inline HostImage composeGrid(std::vector<std::vector<HostImage>> const& rows, float sep, Index gap = 2) {
  const Index tw = rows.front().front().geometry.nx(), th = rows.front().front().geometry.ny();
  Index cols = 0;
  for (auto const& r : rows) cols = std::max<Index>(cols, static_cast<Index>(r.size()));
  const Index nr = static_cast<Index>(rows.size());
  HostImage g("kortex::validation::montage",
              Geometry::make2D(cols * tw + (cols - 1) * gap, nr * th + (nr - 1) * gap));
  Kokkos::deep_copy(g.data, sep);
  for (Index r = 0; r < nr; ++r)
    for (Index c = 0; c < static_cast<Index>(rows[r].size()); ++c) {
      HostImage const& t = rows[r][c];
      for (Index j = 0; j < th; ++j)
        for (Index i = 0; i < tw; ++i) g.data(0, r * (th + gap) + j, c * (tw + gap) + i) = t.data(0, j, i);
    }
  return g;
}

#if KORTEX_VALIDATION_HAVE_IO
// "head_ge/01.dcm" -> "head_ge/01", "x.nii.gz" -> "x".
inline std::string stripImageExtension(std::string const& s) {
  const std::filesystem::path p(s);
  return (p.parent_path() / io::imageStem(p)).string();
}
#endif

inline std::string backendLabel(Backend b) {
  if (b == Backend::Cpu)
    return "cpu reference (OpenMP, " + std::to_string(omp_get_max_threads()) + " threads)";
  return std::string("kokkos ") + Kokkos::DefaultExecutionSpace::name();
}

}  // namespace kortex::validation::detail
