// Reconstruct that filters as it expands (gpu/multires/Multires.hpp, FilterSchedule::InReconstruct): for
// float layers with the Reuse layer bilateral, g'_k = l'_k + expand(g'_{k+1}) with l'_k = BF(l_k) formed
// where it is used, so the filtered layer is never stored and read back, and the filter's exp-bound work
// overlaps the expand's memory traffic in one kernel per level.
//
// One work item per coarse pixel (i, j), as FusedDirect's reconstruct: the 2x2 fine outputs of the
// pixel. l'_k at the quad comes from reuseColumn (gpu/multires/detail/MultiresBilateralKernels.hpp) with
// P = 2, once per column of the quad: each output's window rows, taps and sums in the Reuse kernel's
// order, so l'_k is the same bits as the layer filter's; expandQuadAt then combines it with the expand
// of g'_{k+1} exactly as FusedDirect does. The result equals the Reuse layer filter followed by
// FusedDirect's reconstruct bit for bit (tstMultires checks it on every execution space).
// Internal header of gpu/multires/Multires.cpp. No Eigen, no OpenMP pragmas, no VTK here.
#pragma once

#include <Kokkos_Core.hpp>

#include <climits>
#include <cstdint>
#include <string>

#include "core/Multires.hpp"
#include "gpu/multires/detail/MultiresBilateralKernels.hpp"
#include "gpu/multires/detail/MultiresPyramidKernels.hpp"

namespace kortex::gpu::multires_detail {

template <class Mem, class OutT, int R, class I>
struct FilterReconstructFunctor {
  ConstLevel<float, Mem> layer;      // l_k, unfiltered
  StencilLevel<float, Mem> coarse;   // g'_{k+1}
  Level<OutT, Mem> out;              // g'_k
  MultiresBFCoeffs coeffs;
  int ny, nx, my, mx, radius;

  KOKKOS_INLINE_FUNCTION void operator()(const I n) const {
    const int i = static_cast<int>(n / mx);
    const int j = static_cast<int>(n - static_cast<I>(i) * mx);
    const int y = 2 * i, x = 2 * j;
    const int rows = ny - y < 2 ? ny - y : 2;
    const std::ptrdiff_t pitch = static_cast<std::ptrdiff_t>(layer.stride(0));
    float f[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};  // f[b][a]: column x + b, row y + a
    for (int b = 0; b < 2; ++b) {
      if (x + b >= nx) break;
      if (rows == 2)
        reuseColumn<2, R, true>(layer.data(), pitch, nx, ny, x + b, y, 2, radius, coeffs, f[b]);
      else
        reuseColumn<2, R, false>(layer.data(), pitch, nx, ny, x + b, y, rows, radius, coeffs, f[b]);
    }
    expandQuadAt<float, OutT, true>(
        i, j, my, mx, ny, nx, 0 /* maxValue: integer levels only */, [&](int yy, int xx) { return coarse(yy, xx); },
        [&](int yy, int xx) {  // selects, not f[xx - x][yy - y]: a run-time index puts f on the stack
          const float* col = xx == x ? f[0] : f[1];
          return yy == y ? col[0] : col[1];
        },
        out);
  }
};

template <class ExecSpace, class OutT, int R>
void launchFilterReconstruct(ExecSpace const& exec, ConstLevel<float, typename ExecSpace::memory_space> layer,
                             ConstLevel<float, typename ExecSpace::memory_space> coarse,
                             Level<OutT, typename ExecSpace::memory_space> out, MultiresBFCoeffs const& coeffs,
                             int radius) {
  using Mem = typename ExecSpace::memory_space;
  const int ny = static_cast<int>(layer.extent(0)), nx = static_cast<int>(layer.extent(1));
  const int my = ceilHalf(ny), mx = ceilHalf(nx);
  const std::int64_t items = static_cast<std::int64_t>(my) * mx;
  const char* label = "kortex::Multires::FilterReconstruct";
  if (items <= INT_MAX)  // 32-bit indices where the level allows them
    Kokkos::parallel_for(label, FlatPolicy32<ExecSpace>(exec, 0, static_cast<int>(items)),
                         FilterReconstructFunctor<Mem, OutT, R, int>{layer, coarse, out, coeffs, ny, nx, my, mx, radius});
  else
    Kokkos::parallel_for(label, FlatPolicy<ExecSpace>(exec, 0, items),
                         FilterReconstructFunctor<Mem, OutT, R, std::int64_t>{layer, coarse, out, coeffs, ny, nx, my,
                                                                              mx, radius});
}

// out = BF(layer) + expand(coarse) (float layers, the Reuse bilateral of `params`). The caller checked
// the extents (the plan's levels).
template <class ExecSpace, class OutT>
void filterReconstructLevel(ExecSpace const& exec, ConstLevel<float, typename ExecSpace::memory_space> layer,
                            ConstLevel<float, typename ExecSpace::memory_space> coarse,
                            Level<OutT, typename ExecSpace::memory_space> out, MultiresParams const& params) {
  const int ny = static_cast<int>(layer.extent(0)), nx = static_cast<int>(layer.extent(1));
  checkExtents2(coarse, ceilHalf(ny), ceilHalf(nx), "coarse level");
  checkExtents2(out, ny, nx, "reconstructed level");
  const MultiresBFCoeffs coeffs = multiresBFCoeffs(params.sigmaSpatial, params.sigmaRange);
  withRadius(params.radius, [&](auto R) {
    launchFilterReconstruct<ExecSpace, OutT, decltype(R)::value>(exec, layer, coarse, out, coeffs, params.radius);
  });
}

}  // namespace kortex::gpu::multires_detail
