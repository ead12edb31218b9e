#include "reference_cpu/Checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/Errors.hpp"
#include "core/ViewChecks.hpp"

namespace kortex::ref::detail {

std::string extentsString(Index nz, Index ny, Index nx) {
  return "(nz,ny,nx) = (" + std::to_string(nz) + "," + std::to_string(ny) + "," +
         std::to_string(nx) + ")";
}

namespace {

template <class ConstView, class View>
Geometry checkViewsImpl(ConstView const& in, View const& out, const char* who) {
  using Value = typename View::non_const_value_type;
  const Index nz = static_cast<Index>(in.extent(0)), ny = static_cast<Index>(in.extent(1)),
              nx = static_cast<Index>(in.extent(2));
  if (nz == 0 || ny == 0 || nx == 0 || in.data() == nullptr)
    throw InvalidArgument(std::string(who) + ": input image is empty, extents " +
                          extentsString(nz, ny, nx));
  const Index oz = static_cast<Index>(out.extent(0)), oy = static_cast<Index>(out.extent(1)),
              ox = static_cast<Index>(out.extent(2));
  if (oz != nz || oy != ny || ox != nx)
    throw InvalidArgument(std::string(who) + ": output extents " + extentsString(oz, oy, ox) +
                          " differ from input extents " + extentsString(nz, ny, nx));
  if (spansOverlap(in, out))
    throw InvalidArgument(std::string(who) +
                          ": input and output views overlap (in-place filtering is not supported)");
  return Geometry::fromSize(nx, ny, nz);
}

}  // namespace

Geometry checkViews(HostConstView const& in, HostView const& out, const char* who) {
  return checkViewsImpl(in, out, who);
}

Geometry checkViews(HostConstU16View const& in, HostU16View const& out, const char* who) {
  return checkViewsImpl(in, out, who);
}


void checkImage(HostImage const& in, const char* who) {
  const auto& d = in.data;
  if (d.data() == nullptr) throw InvalidArgument(std::string(who) + ": input image is empty");
  if (static_cast<Index>(d.extent(0)) != in.geometry.nz() ||
      static_cast<Index>(d.extent(1)) != in.geometry.ny() ||
      static_cast<Index>(d.extent(2)) != in.geometry.nx())
    throw InvalidArgument(std::string(who) + ": image data extents " +
                          extentsString(static_cast<Index>(d.extent(0)),
                                        static_cast<Index>(d.extent(1)),
                                        static_cast<Index>(d.extent(2))) +
                          " do not match its geometry (" + describe(in.geometry) + ")");
}

}  // namespace kortex::ref::detail
