// CPU reference bilateral filter: the direct (2r+1)^d sum of core/Bilateral.hpp's definition,
// written independently of the Kokkos kernels (it shares only BilateralParams and the clamp rule).
//
// One output row at a time (OpenMP over the nz*ny rows): for every window row (dz, dy) the
// clamped source row is copied once into an x-padded double buffer, then every tap dx is an
// Eigen array expression over the whole row:
//   w = spatial(dz,dy,dx) * exp(-(I(x+o) - I(x))^2 / (2 sigma_r^2)),  wsum += w,  vsum += w I(x+o)
// The spatial factor is tabulated in double; the range factor is an exact exp per tap. Weights
// and sums are double; the result is rounded to float once.
#include "reference_cpu/Bilateral.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "core/Errors.hpp"

namespace kortex::ref {
namespace {

using HostConstView = ConstImageView<Kokkos::HostSpace>;
using HostView = ImageView<Kokkos::HostSpace>;
using ConstRowF = Eigen::Map<const Eigen::ArrayXf>;
using RowF = Eigen::Map<Eigen::ArrayXf>;

// Below this exponent exp() is subnormal (< 2.2e-308); such a weight is replaced by 0, an absolute
// change below 3.3e-308 against a weight sum >= 1, and it keeps subnormals out of the sums.
constexpr double kMinExpArgument = -708.0;

Index clampIndex(Index i, Index n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }

std::string extentsString(Index nz, Index ny, Index nx) {
  return "(nz,ny,nx) = (" + std::to_string(nz) + "," + std::to_string(ny) + "," +
         std::to_string(nx) + ")";
}

// Extents, emptiness and aliasing; returns the geometry the extents describe.
Geometry checkViews(HostConstView const& in, HostView const& out, const char* who) {
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
  const auto inBegin = reinterpret_cast<std::uintptr_t>(in.data());
  const auto inEnd = inBegin + in.span() * sizeof(float);
  const auto outBegin = reinterpret_cast<std::uintptr_t>(out.data());
  const auto outEnd = outBegin + out.span() * sizeof(float);
  if (inBegin < outEnd && outBegin < inEnd)
    throw InvalidArgument(std::string(who) +
                          ": input and output views overlap (in-place filtering is not supported)");
  return Geometry::fromSize(nx, ny, nz);
}

// The filter is not defined for NaN/Inf: reports the first such voxel in memory order.
void checkFinite(HostConstView const& in) {
  const Index nz = static_cast<Index>(in.extent(0)), ny = static_cast<Index>(in.extent(1)),
              nx = static_cast<Index>(in.extent(2));
  const Index none = std::numeric_limits<Index>::max();
  Index first = none;
#pragma omp parallel for schedule(static) reduction(min : first)
  for (Index row = 0; row < nz * ny; ++row) {
    const float* p = &in(row / ny, row % ny, 0);
    for (Index i = 0; i < nx; ++i)
      if (!std::isfinite(p[i])) {
        first = std::min(first, row * nx + i);
        break;
      }
  }
  if (first != none) {
    const Index x = first % nx, y = (first / nx) % ny, z = first / (nx * ny);
    throw InvalidArgument("input contains NaN or Inf at voxel (" + std::to_string(x) + "," +
                          std::to_string(y) + "," + std::to_string(z) + ")");
  }
}

}  // namespace

void bilateral(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out,
               BilateralParams const& params) {
  const Geometry g = checkViews(in, out, "bilateral");
  params.validateFor(g);
  checkFinite(in);

  const Index nz = g.nz(), ny = g.ny(), nx = g.nx();
  const int r = params.radius;
  const int rz = g.dimension == 3 ? r : 0;  // nz == 1: 2D window, no z taps
  const int w = 2 * r + 1;

  // Spatial factor exp(-|o|^2 / (2 sigma_s^2)), |o| in voxel units, tabulated in double.
  const double sigmaS = params.sigmaSpatial;
  std::vector<double> spatial(static_cast<std::size_t>((2 * rz + 1) * w * w));
  for (int dz = -rz; dz <= rz; ++dz)
    for (int dy = -r; dy <= r; ++dy)
      for (int dx = -r; dx <= r; ++dx)
        spatial[static_cast<std::size_t>(((dz + rz) * w + (dy + r)) * w + (dx + r))] =
            std::exp(-static_cast<double>(dx * dx + dy * dy + dz * dz) / (2.0 * sigmaS * sigmaS));

  // sigma_r = +inf: every range factor is exactly 1 (a truncated, normalised Gaussian blur).
  const bool rangeIsInf = std::isinf(params.sigmaRange);
  const double sigmaR = params.sigmaRange;
  const double negInvTwoSigmaR2 = rangeIsInf ? 0.0 : -1.0 / (2.0 * sigmaR * sigmaR);

  // Exceptions (std::bad_alloc) must not leave an OpenMP region: the first one is kept and
  // rethrown after it.
  std::exception_ptr failure;
#pragma omp parallel
  {
    Eigen::ArrayXd padded, centre, arg, weight, wsum, vsum;
    bool ready = false;
    try {
      padded.resize(nx + 2 * r);  // clamped source row, padded by r on both sides
      centre.resize(nx);
      arg.resize(nx);
      weight.resize(nx);
      wsum.resize(nx);
      vsum.resize(nx);
      ready = true;
    } catch (...) {
#pragma omp critical(kortex_ref_bilateral_failure)
      if (!failure) failure = std::current_exception();
    }

#pragma omp for schedule(static)
    for (Index row = 0; row < nz * ny; ++row) {
      if (!ready) continue;
      const Index k = row / ny, j = row % ny;
      centre = ConstRowF(&in(k, j, 0), nx).cast<double>();
      wsum.setZero();
      vsum.setZero();
      for (int dz = -rz; dz <= rz; ++dz)
        for (int dy = -r; dy <= r; ++dy) {
          const float* src = &in(clampIndex(k + dz, nz), clampIndex(j + dy, ny), 0);
          padded.head(r).setConstant(static_cast<double>(src[0]));
          padded.segment(r, nx) = ConstRowF(src, nx).cast<double>();
          padded.tail(r).setConstant(static_cast<double>(src[nx - 1]));
          const double* sp =
              &spatial[static_cast<std::size_t>(((dz + rz) * w + (dy + r)) * w)];
          for (int dx = -r; dx <= r; ++dx) {
            const double s = sp[dx + r];
            const auto values = padded.segment(r + dx, nx);
            if (rangeIsInf) {
              wsum += s;
              vsum += s * values;
            } else {
              arg = (values - centre).square() * negInvTwoSigmaR2;
              weight = s * arg.max(kMinExpArgument).exp();
              for (Index i = 0; i < nx; ++i)
                if (arg[i] < kMinExpArgument) weight[i] = 0.0;
              wsum += weight;
              vsum += weight * values;
            }
          }
        }
      RowF(&out(k, j, 0), nx) = (vsum / wsum).cast<float>();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

HostImage bilateral(HostImage const& in, BilateralParams const& params) {
  const auto& d = in.data;
  if (d.data() == nullptr) throw InvalidArgument("bilateral: input image is empty");
  if (static_cast<Index>(d.extent(0)) != in.geometry.nz() ||
      static_cast<Index>(d.extent(1)) != in.geometry.ny() ||
      static_cast<Index>(d.extent(2)) != in.geometry.nx())
    throw InvalidArgument("bilateral: image data extents " +
                          extentsString(static_cast<Index>(d.extent(0)),
                                        static_cast<Index>(d.extent(1)),
                                        static_cast<Index>(d.extent(2))) +
                          " do not match its geometry (" + describe(in.geometry) + ")");
  HostImage out("kortex::ref::Bilateral::out", in.geometry);
  out.metadata = in.metadata;
  bilateral(in.data, out.data, params);
  return out;
}

}  // namespace kortex::ref
