// The warp kernel (gpu/imageops/ImageOps.hpp warp): out(x) = I(x - u(x)), trilinear with the
// clamp rule (core/Registration.hpp regSampleTrilinear), one work item per voxel, x fastest.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "core/Image.hpp"
#include "core/Registration.hpp"
#include "gpu/Fields.hpp"

namespace kortex::gpu::imageops_detail {

template <class Mem>
struct WarpFunctor {
  Kokkos::View<const float***, Kokkos::LayoutRight, Mem, Kokkos::MemoryTraits<Kokkos::RandomAccess>> moving;
  ConstField<Mem> u;
  ImageView<Mem> out;
  int nx, ny;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    const int x = static_cast<int>(i % nx);
    const std::int64_t t = i / nx;
    const int y = static_cast<int>(t % ny), z = static_cast<int>(t / ny);
    float grad[3];
    out(z, y, x) = regSampleTrilinear(moving, static_cast<float>(x) - u(0, z, y, x),
                                      static_cast<float>(y) - u(1, z, y, x),
                                      static_cast<float>(z) - u(2, z, y, x), grad);
  }
};

}  // namespace kortex::gpu::imageops_detail
