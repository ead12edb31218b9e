#include "reference_cpu/ImageOps.hpp"

#include <algorithm>
#include <string>

#include "core/Errors.hpp"
#include "core/ViewChecks.hpp"
#include "reference_cpu/detail/Trilinear.hpp"

namespace kortex::ref {
namespace {

void requireSame(ConstHostView const& a, std::size_t e0, std::size_t e1, std::size_t e2, const char* who) {
  if (a.extent(0) != e0 || a.extent(1) != e1 || a.extent(2) != e2)
    throw InvalidArgument(std::string(who) + ": images of different extents");
}


}  // namespace

void axpby(double a, ConstHostView y, double b, ConstHostView z, HostView out) {
  requireSame(z, y.extent(0), y.extent(1), y.extent(2), "axpby");
  requireSame(out, y.extent(0), y.extent(1), y.extent(2), "axpby");
  const long n = long(y.size());
#pragma omp parallel for
  for (long i = 0; i < n; ++i) out.data()[i] = float(a * y.data()[i] + b * z.data()[i]);
}

void normaliseRange(ConstHostView x, double lo, double hi, HostView out) {
  requireSame(out, x.extent(0), x.extent(1), x.extent(2), "normaliseRange");
  if (!(hi > lo)) throw InvalidArgument("normaliseRange: the range needs hi > lo");
  const long n = long(x.size());
#pragma omp parallel for
  for (long i = 0; i < n; ++i) out.data()[i] = float((x.data()[i] - lo) / (hi - lo));
}

void average(std::vector<ConstHostView> const& inputs, HostView out) {
  if (inputs.empty() || int(inputs.size()) > kMaxAverageInputs)
    throw InvalidArgument("average: between 1 and " + std::to_string(kMaxAverageInputs) + " images, got " +
                          std::to_string(inputs.size()));
  for (auto const& in : inputs) requireSame(in, out.extent(0), out.extent(1), out.extent(2), "average");
  const long n = long(out.size());
#pragma omp parallel for
  for (long i = 0; i < n; ++i) {
    double s = 0.0;
    for (auto const& in : inputs) s += in.data()[i];
    out.data()[i] = float(s / double(inputs.size()));
  }
}

void gradient(ConstHostView a, Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> out) {
  if (out.extent(0) != 3 || out.extent(1) != a.extent(0) || out.extent(2) != a.extent(1) || out.extent(3) != a.extent(2))
    throw InvalidArgument("gradient: the output must be a 3-component field on the image grid");
  const long nz = long(a.extent(0)), ny = long(a.extent(1)), nx = long(a.extent(2));
#pragma omp parallel for
  for (long z = 0; z < nz; ++z)
    for (long y = 0; y < ny; ++y)
      for (long x = 0; x < nx; ++x) {
        out(0, z, y, x) = float(0.5 * (double(a(z, y, detail::clampIndex(x + 1, nx))) - a(z, y, detail::clampIndex(x - 1, nx))));
        out(1, z, y, x) = float(0.5 * (double(a(z, detail::clampIndex(y + 1, ny), x)) - a(z, detail::clampIndex(y - 1, ny), x)));
        out(2, z, y, x) = float(0.5 * (double(a(detail::clampIndex(z + 1, nz), y, x)) - a(detail::clampIndex(z - 1, nz), y, x)));
      }
}

void warp(ConstHostView moving, Kokkos::View<const float****, Kokkos::LayoutRight, Kokkos::HostSpace> u, HostView out) {
  requireSame(out, moving.extent(0), moving.extent(1), moving.extent(2), "warp");
  if (moving.size() == 0) throw InvalidArgument("warp: image is empty");
  if (u.extent(0) != 3 || u.extent(1) != moving.extent(0) || u.extent(2) != moving.extent(1) || u.extent(3) != moving.extent(2))
    throw InvalidArgument("warp: the displacement must be a 3-component field on the image grid");
  if (spansOverlap(out, moving) || spansOverlap(out, u))
    throw InvalidArgument("warp: the output image overlaps an input (in-place is not supported)");
  const Index n[3] = {Index(moving.extent(2)), Index(moving.extent(1)), Index(moving.extent(0))};
  const long rows = long(n[2] * n[1]);
#pragma omp parallel for schedule(static)
  for (long row = 0; row < rows; ++row) {
    const Index z = row / n[1], y = row % n[1];
    for (Index x = 0; x < n[0]; ++x) {
      // the spec's sample point: the float32 difference, then used in double
      const double p[3] = {double(static_cast<float>(x) - u(0, z, y, x)), double(static_cast<float>(y) - u(1, z, y, x)),
                           double(static_cast<float>(z) - u(2, z, y, x))};
      out(z, y, x) = static_cast<float>(detail::sampleTrilinear(moving, n, p, false).value);
    }
  }
}

}  // namespace kortex::ref
