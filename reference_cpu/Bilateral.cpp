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
#include "reference_cpu/Checks.hpp"

namespace kortex::ref {

using namespace detail;

namespace {

using ConstRowF = Eigen::Map<const Eigen::ArrayXf>;
using RowF = Eigen::Map<Eigen::ArrayXf>;

}  // namespace

void bilateral(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out,
               BilateralParams const& params) {
  const Geometry g = checkViews(in, out, "bilateral");

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
  checkImage(in, "bilateral");
  HostImage out("kortex::ref::Bilateral::out", in.geometry);
  out.metadata = in.metadata;
  bilateral(in.data, out.data, params);
  return out;
}

}  // namespace kortex::ref
