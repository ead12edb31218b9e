#include "reference_cpu/Inverse.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/Errors.hpp"
#include "reference_cpu/detail/Trilinear.hpp"

namespace kortex::ref {
namespace {

using ConstHostField = Kokkos::View<const float****, Kokkos::LayoutRight, Kokkos::HostSpace>;

// u's components as 3D views, made before any parallel loop: copying a View inside one would touch
// its reference count from several threads.
struct Components {
  std::array<ConstImageView<Kokkos::HostSpace>, 3> c;
  Index n[3];
  double hi[3];
  explicit Components(ConstHostField const& u)
      : c{Kokkos::subview(u, 0, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL), Kokkos::subview(u, 1, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL),
          Kokkos::subview(u, 2, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL)},
        n{Index(u.extent(3)), Index(u.extent(2)), Index(u.extent(1))},
        hi{double(u.extent(3)) - 1.0, double(u.extent(2)) - 1.0, double(u.extent(1)) - 1.0} {}
};

// u at p (x, y, z), each component through the reference's trilinear interpolant.
Eigen::Vector3d sampleU(Components const& u, Eigen::Vector3d const& p) {
  const double q[3] = {p.x(), p.y(), p.z()};
  Eigen::Vector3d v;
  for (int c = 0; c < 3; ++c) v[c] = detail::sampleTrilinear(u.c[std::size_t(c)], u.n, q, false).value;
  return v;
}

// The points beyond the grid see u clamped: clamp before differencing so the Jacobian there is 0.
Eigen::Vector3d clampToGrid(Components const& u, Eigen::Vector3d p) {
  for (int a = 0; a < 3; ++a) p[a] = std::min(std::max(p[a], 0.0), u.hi[a]);
  return p;
}

constexpr double kDifferenceStep = 1e-4;  // voxels: inside a trilinear cell the difference is exact

double residualAt(Components const& u, Eigen::Vector3d const& p, Eigen::Vector3d const& s) {
  return (p - sampleU(u, p) - s).norm();
}

double solvePoint(Components const& u, Eigen::Vector3d const& s, InverseParams const& params, Eigen::Vector3d& p) {
  p = s + sampleU(u, s);
  double residual = residualAt(u, p, s);
  const double* hi = u.hi;
  for (int it = 0; it < params.maxIterations && residual > params.tolerance; ++it) {
    const Eigen::Vector3d g = p - sampleU(u, p) - s;
    const Eigen::Vector3d c = clampToGrid(u, p);
    Eigen::Matrix3d J = Eigen::Matrix3d::Identity();
    for (int a = 0; a < 3; ++a) {
      if (p[a] < 0.0 || p[a] > hi[a] || hi[a] <= 0.0) continue;  // clamped axis: u constant along it
      Eigen::Vector3d lo = c, up = c;
      lo[a] = std::max(c[a] - kDifferenceStep, 0.0);
      up[a] = std::min(c[a] + kDifferenceStep, hi[a]);
      J.col(a) -= (sampleU(u, up) - sampleU(u, lo)) / (up[a] - lo[a]);
    }
    Eigen::Vector3d d = J.determinant() > kInverseMinDet ? Eigen::Vector3d(J.partialPivLu().solve(g)) : g;
    if (d.norm() > kInverseMaxStep) d *= kInverseMaxStep / d.norm();
    // Halve until |g| decreases (at most kInverseHalvings times; the last trial is taken regardless).
    Eigen::Vector3d trial = p - d;
    double rt = residualAt(u, trial, s);
    for (int h = 0; h < kInverseHalvings && !(rt < residual); ++h) {
      d *= 0.5;
      trial = p - d;
      rt = residualAt(u, trial, s);
    }
    p = trial;
    residual = rt;
  }
  return residual;
}

}  // namespace

InverseStats invertMap(ConstHostField u, AffineTransform const& movingToS,
                       Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> preimage, InverseParams const& params) {
  if (u.data() == nullptr || u.extent(0) != 3 || u.size() == 0)
    throw InvalidArgument("invertMap: the displacement must be a non-empty 3-component field");
  if (preimage.data() == nullptr || preimage.extent(0) != 3 || preimage.size() == 0)
    throw InvalidArgument("invertMap: the preimage must be a non-empty 3-component field");
  Eigen::Matrix<double, 3, 4> M;  // [M | c + t - M c]
  for (int r = 0; r < 3; ++r) {
    double off = movingToS.centre[std::size_t(r)] + movingToS.translation[std::size_t(r)];
    for (int c = 0; c < 3; ++c) {
      M(r, c) = movingToS.matrix[std::size_t(3 * r + c)];
      off -= M(r, c) * movingToS.centre[std::size_t(c)];
    }
    M(r, 3) = off;
  }
  const long mz = long(preimage.extent(1)), my = long(preimage.extent(2)), mx = long(preimage.extent(3));
  const Components comps(u);
  double maxResidual = 0.0;
  long unconverged = 0;
#pragma omp parallel for collapse(2) reduction(max : maxResidual) reduction(+ : unconverged)
  for (long z = 0; z < mz; ++z)
    for (long y = 0; y < my; ++y)
      for (long x = 0; x < mx; ++x) {
        const Eigen::Vector3d s = M * Eigen::Vector4d(double(x), double(y), double(z), 1.0);
        Eigen::Vector3d p;
        const double r = solvePoint(comps, s, params, p);
        for (int a = 0; a < 3; ++a) preimage(a, z, y, x) = float(p[a]);
        maxResidual = std::max(maxResidual, r);
        if (!(r <= params.tolerance)) ++unconverged;
      }
  InverseStats st;
  st.maxResidual = maxResidual;
  st.unconverged = unconverged;
  st.points = mz * my * mx;
  return st;
}

}  // namespace kortex::ref
