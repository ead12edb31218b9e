// Device vector-field views shared by the Kokkos registration families (core VectorField layout:
// extents (components, nz, ny, nx), LayoutRight, component 0 = x).
#pragma once

#include <Kokkos_Core.hpp>

namespace kortex::gpu {

template <class Mem>
using Field = Kokkos::View<float****, Kokkos::LayoutRight, Mem>;
template <class Mem>
using ConstField = Kokkos::View<const float****, Kokkos::LayoutRight, Mem>;

}  // namespace kortex::gpu
