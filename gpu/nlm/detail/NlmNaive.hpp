// NLM variant Naive: RangePolicy, one output voxel per thread (x fastest across threads, so a
// warp reads consecutive addresses), every patch sample read from global memory with the clamp
// rule. Cost per voxel: |S| * |P| sample pairs. The reference point for the other variants.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "gpu/nlm/detail/NlmCommon.hpp"

namespace kortex::gpu::nlm_detail {

template <int Dim, class ExecSpace>
struct NaiveKernel {
  using memory_space = typename ExecSpace::memory_space;

  InputView<memory_space> in;
  ImageView<memory_space> out;
  Problem pb;

  KOKKOS_FUNCTION void operator()(const std::int64_t i) const {
    const int x = static_cast<int>(i % pb.nx);
    const std::int64_t t = i / pb.nx;
    const int y = static_cast<int>(t % pb.ny);
    const int z = Dim == 3 ? static_cast<int>(t / pb.ny) : 0;
    const int r = pb.r, R = pb.R;
    const int rz = Dim == 3 ? r : 0, Rz = Dim == 3 ? R : 0;

    // Centred sums: sum w * (I(x+o) - I(x)), float over one row of offsets, double across rows
    // (see detail/NlmCommon.hpp: accumulation precision).
    const float centre = in(z, y, x);
    double totW = 0.0, totWI = 0.0;
    for (int oz = -Rz; oz <= Rz; ++oz)
      for (int oy = -R; oy <= R; ++oy) {
        float rowW = 0.0f, rowWI = 0.0f;
        for (int ox = -R; ox <= R; ++ox) {
          float w = 1.0f;  // centre weight, set explicitly
          if (ox != 0 || oy != 0 || oz != 0) {
            float d = 0.0f;
            for (int pz = -rz; pz <= rz; ++pz) {
              const int cz = clampIndex(z + pz, pb.nz), sz = clampIndex(z + oz + pz, pb.nz);
              for (int py = -r; py <= r; ++py) {
                const int cy = clampIndex(y + py, pb.ny), sy = clampIndex(y + oy + py, pb.ny);
                for (int px = -r; px <= r; ++px)
                  d += squaredDifference(in(cz, cy, clampIndex(x + px, pb.nx)),
                                         in(sz, sy, clampIndex(x + ox + px, pb.nx)));
              }
            }
            w = nlmWeight(d, pb.log2Coefficient);
          }
          const float v =
              in(clampIndex(z + oz, pb.nz), clampIndex(y + oy, pb.ny), clampIndex(x + ox, pb.nx));
          rowW += w;
          rowWI += w * (v - centre);
        }
        totW += rowW;
        totWI += rowWI;
      }
    out(z, y, x) = nlmNormalise(centre, totW, totWI);
  }
};

template <int Dim, class ExecSpace>
void launchNaive(ExecSpace const& exec, InputView<typename ExecSpace::memory_space> in,
                 ImageView<typename ExecSpace::memory_space> out, Problem const& pb) {
  const std::int64_t n = static_cast<std::int64_t>(pb.nx) * pb.ny * pb.nz;
  Kokkos::parallel_for(
      "kortex::Nlm::Naive",
      Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, n),
      NaiveKernel<Dim, ExecSpace>{in, out, pb});
}

}  // namespace kortex::gpu::nlm_detail
