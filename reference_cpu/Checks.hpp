// Checks and helpers shared by the CPU reference filters (internal to reference_cpu/; not used
// by the Kokkos code, which has its own, so a bug here cannot hide one there).
#pragma once

#include <cstdint>
#include <string>

#include "core/Image.hpp"

namespace kortex::ref::detail {

using HostConstView = ConstImageView<Kokkos::HostSpace>;
using HostView = ImageView<Kokkos::HostSpace>;
// 16-bit images (the multires integer pipeline); the same types as core/Multires.hpp's
// ConstU16ImageView / U16ImageView on the host.
using HostConstU16View = Kokkos::View<const std::uint16_t***, Kokkos::LayoutRight, Kokkos::HostSpace>;
using HostU16View = Kokkos::View<std::uint16_t***, Kokkos::LayoutRight, Kokkos::HostSpace>;

// Below this exponent exp() is subnormal (< 2.2e-308); such a weight is replaced by 0, an absolute
// change below 3.3e-308 against a weight sum >= 1, and it keeps subnormals out of the sums.
constexpr double kMinExpArgument = -708.0;

// The clamp rule of core/Boundary.hpp, written on its own for 64-bit indices.
inline Index clampIndex(Index i, Index n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }

std::string extentsString(Index nz, Index ny, Index nx);
// Extents, emptiness and aliasing; returns the geometry the extents describe.
Geometry checkViews(HostConstView const& in, HostView const& out, const char* who);
Geometry checkViews(HostConstU16View const& in, HostU16View const& out, const char* who);
// A HostImage whose data is allocated and matches its geometry.
void checkImage(HostImage const& in, const char* who);

}  // namespace kortex::ref::detail
