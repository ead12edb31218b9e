// The resampling kernel (gpu/imageops/Resample.hpp): one work item per reference voxel, x fastest;
// the chain and the interpolation are core/Apply.hpp's per-point functions.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "core/Apply.hpp"
#include "core/Image.hpp"

namespace kortex::gpu::imageops_detail {

template <class Mem, ApplyInterpolation Interp>
struct ResampleFunctor {
  Kokkos::View<const float***, Kokkos::LayoutRight, Mem, Kokkos::MemoryTraits<Kokkos::RandomAccess>> input;
  const float* fields;
  ApplyChainCoeffs chain;
  ImageView<Mem> out;
  int nx, ny;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    const int x = static_cast<int>(i % nx);
    const std::int64_t r = i / nx;
    const int y = static_cast<int>(r % ny), z = static_cast<int>(r / ny);
    double q[3];
    applyChainPoint(chain, fields, x, y, z, q);
    if (Interp == ApplyInterpolation::Linear)
      out(z, y, x) = applySampleLinear(input, q);
    else if (Interp == ApplyInterpolation::Nearest)
      out(z, y, x) = applySampleNearest(input, q);
    else
      out(z, y, x) = applySampleLabel(input, q);
  }
};

}  // namespace kortex::gpu::imageops_detail
