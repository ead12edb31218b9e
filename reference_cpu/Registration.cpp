// CPU reference of the unbiased fluid registration (core/Registration.hpp's specification),
// written independently of the Kokkos code: it shares only RegistrationParams, the energy/result
// types, finishEnergy, smoothingRadius and the conventions of the spec text. Every per-voxel
// formula is written here again, in double:
//   G(x)      G_ij = ( u_i(c(x + e_j)) - u_i(c(x - e_j)) ) / 2, c = clamp per axis
//   A = I - G with rows a0, a1, a2:  cof(A) has rows a1 x a2, a2 x a0, a0 x a1 (= dJ/dA),
//             J = det A = a0 . (a1 x a2)
//   T(p)      trilinear interpolant of the clamp-extended moving image, written as the sum of
//             the 8 corner values times the products of the 1D hat weights (1 - t, t); grad T(p)
//             the same weighted sum of the corners' clamped central differences
//             (T(c(k + e_a)) - T(c(k - e_a))) / 2.
//   f         f_data = (T(x - u) - R) grad T(x - u);  f_reg_i = sum_j (D_j^T W_ij),
//             W = Phi'(J) cof(A), D^T the transpose of the clamped central-difference matrix.
// Sums (E_data, E_reg) are double partial sums per image row added in row order, so energies and
// every field are bitwise independent of the number of OpenMP threads.
//
// Conventions where the spec leaves a choice to the implementation:
//   * A folded voxel (J <= 0) contributes +inf to E_reg and W = 0 to the force (the force is
//     never used on a folded field by fluidRegister: the initial field is checked and only
//     candidates with min J > 0 are accepted).
//   * An iteration whose rate is zero everywhere (m == 0) counts as an iteration (one velocity
//     was evaluated), is recorded in the history as not accepted and stops with ZeroVelocity.
//   * A step that is accepted on the last allowed iteration and also meets the convergence test
//     stops with Converged rather than IterationCap.
//
// Memory of fluidRegister: besides u, four float fields (force, velocity, rate, candidate), the
// force's double buffers (3 + 9 doubles per voxel) and the smoothing's (2 x 3 doubles per voxel,
// allocated per call): about 190 bytes per voxel.
#include "reference_cpu/Registration.hpp"

#include <Eigen/Core>
#include <Eigen/Geometry>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/ViewChecks.hpp"
#include "core/Errors.hpp"
#include "reference_cpu/Checks.hpp"
#include "reference_cpu/detail/Trilinear.hpp"

namespace kortex::ref {

using namespace detail;

namespace {

using Vec3 = Eigen::Vector3d;
using Mat3 = Eigen::Matrix3d;
using HostImageViewRW = ImageView<Kokkos::HostSpace>;

// Extents of one 3D grid; voxel (z, y, x) has linear index (z * ny + y) * nx + x.
struct Grid {
  Index nz = 0, ny = 0, nx = 0;
  Index voxels() const { return nz * ny * nx; }
  Index rows() const { return nz * ny; }
  Index extent(int axis) const { return axis == 0 ? nx : (axis == 1 ? ny : nz); }
  Index stride(int axis) const { return axis == 0 ? 1 : (axis == 1 ? nx : nx * ny); }
};

template <class View>
Grid gridOfImage(View const& v) {
  return {static_cast<Index>(v.extent(0)), static_cast<Index>(v.extent(1)),
          static_cast<Index>(v.extent(2))};
}

template <class View>
Grid gridOfField(View const& v) {
  return {static_cast<Index>(v.extent(1)), static_cast<Index>(v.extent(2)),
          static_cast<Index>(v.extent(3))};
}

std::string extents(Grid const& g) { return extentsString(g.nz, g.ny, g.nx); }

std::string voxelString(Index x, Index y, Index z) {
  return "(" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) + ")";
}

std::string number(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

// ---- argument checks ---------------------------------------------------------------------------


template <class View>
Grid checkField(View const& f, const char* who, const char* name) {
  if (f.data() == nullptr || f.size() == 0)
    throw InvalidArgument(std::string(who) + ": the " + name + " field is empty");
  if (f.extent(0) != 3)
    throw InvalidArgument(std::string(who) + ": the " + name +
                          " field must have 3 components (x, y, z), got " +
                          std::to_string(f.extent(0)));
  if (!f.span_is_contiguous())
    throw InvalidArgument(std::string(who) + ": the " + name + " field must be contiguous");
  return gridOfField(f);
}

template <class View>
Grid checkImageView(View const& img, const char* who, const char* name) {
  if (img.data() == nullptr || img.size() == 0)
    throw InvalidArgument(std::string(who) + ": the " + name + " image is empty");
  if (!img.span_is_contiguous())
    throw InvalidArgument(std::string(who) + ": the " + name + " image must be contiguous");
  return gridOfImage(img);
}

void checkSameGrid(Grid const& expected, Grid const& got, const char* who, const char* name,
                   const char* reference) {
  if (expected.nz != got.nz || expected.ny != got.ny || expected.nx != got.nx)
    throw InvalidArgument(std::string(who) + ": the " + name + " extents " + extents(got) +
                          " differ from the " + reference + " extents " + extents(expected));
}

void checkLambda(double lambda, const char* who) {
  if (!(lambda >= 0.0) || !std::isfinite(lambda))
    throw InvalidArgument(std::string(who) + ": lambda must be finite and >= 0, got " +
                          number(lambda));
}

void checkSigma(float sigma, const char* who) {
  if (!(sigma > 0.0f) || !std::isfinite(sigma) ||
      smoothingRadius(sigma) > RegistrationParams::kMaxRadius)
    throw InvalidArgument(std::string(who) + ": sigma must be in (0, " +
                          std::to_string(RegistrationParams::kMaxRadius / 3) + "] voxels, got " +
                          number(sigma));
}




// ---- per-voxel maths ---------------------------------------------------------------------------


// G at voxel (z, y, x): G(i, j) = D_j u_i, clamped central differences.
inline Mat3 displacementGradient(ConstHostField const& u, Grid const& g, Index z, Index y, Index x) {
  const Index xm = detail::clampIndex(x - 1, g.nx), xp = detail::clampIndex(x + 1, g.nx);
  const Index ym = detail::clampIndex(y - 1, g.ny), yp = detail::clampIndex(y + 1, g.ny);
  const Index zm = detail::clampIndex(z - 1, g.nz), zp = detail::clampIndex(z + 1, g.nz);
  Mat3 G;
  for (int i = 0; i < 3; ++i) {
    G(i, 0) = 0.5 * (double(u(i, z, y, xp)) - double(u(i, z, y, xm)));
    G(i, 1) = 0.5 * (double(u(i, z, yp, x)) - double(u(i, z, ym, x)));
    G(i, 2) = 0.5 * (double(u(i, zp, y, x)) - double(u(i, zm, y, x)));
  }
  return G;
}

// det A and its cofactor matrix (dJ/dA) from the rows of A = I - G.
struct Deformation {
  double J;
  Mat3 cofactor;
};

inline Deformation deformation(Mat3 const& G) {
  const Mat3 A = Mat3::Identity() - G;
  const Vec3 a0 = A.row(0).transpose(), a1 = A.row(1).transpose(), a2 = A.row(2).transpose();
  Deformation d;
  d.cofactor.row(0) = a1.cross(a2).transpose();
  d.cofactor.row(1) = a2.cross(a0).transpose();
  d.cofactor.row(2) = a0.cross(a1).transpose();
  d.J = a0.dot(a1.cross(a2));
  return d;
}

// Phi(J) = (J - 1) log J, +inf for J <= 0; Phi'(J) = 1 + log J - 1/J.
inline double phi(double J) {
  return J > 0.0 ? (J - 1.0) * std::log(J) : std::numeric_limits<double>::infinity();
}
inline double phiPrime(double J) { return 1.0 + std::log(J) - 1.0 / J; }

// Trilinear interpolant of the clamp-extended image at p = (px, py, pz) (index units) and the
// interpolant of its central-difference gradient (d/dx, d/dy, d/dz) with the same weights.
struct Sample {
  double value;
  Vec3 gradient;
};

// withGradient == false: the value only (energy-only passes), gradient left zero.
inline Sample sampleTrilinear(ConstHostImageView const& img, Grid const& g, Vec3 const& p, bool withGradient) {
  const Index n[3] = {g.nx, g.ny, g.nz};
  const double q[3] = {p[0], p[1], p[2]};
  const detail::TrilinearSample t = detail::sampleTrilinear(img, n, q, withGradient);
  return Sample{t.value, Vec3(t.gradient[0], t.gradient[1], t.gradient[2])};
}

// The spec's sample point: p = fl(x - u(x)), the float32 difference, then used in double.
inline Vec3 samplePoint(ConstHostField const& u, Index z, Index y, Index x) {
  const float px = static_cast<float>(x) - u(0, z, y, x);
  const float py = static_cast<float>(y) - u(1, z, y, x);
  const float pz = static_cast<float>(z) - u(2, z, y, x);
  return Vec3(double(px), double(py), double(pz));
}

// ---- energy and force ----------------------------------------------------------------------------

// Optional outputs of the energy pass (the force's buffers).
struct ForceBuffers {
  std::vector<double> data;    // 3 per voxel: f_data
  std::vector<double> stress;  // 9 per voxel: W_ij at 9 * voxel + 3 i + j
};

// E(u); fills the force buffers when `buffers` is not null. Inputs are not checked.
RegistrationEnergy energyPass(ConstHostImageView const& moving, ConstHostImageView const& fixed,
                              ConstHostField const& u, double lambda, ForceBuffers* buffers) {
  const Grid g = gridOfImage(moving);
  std::vector<double> dataRow(static_cast<std::size_t>(g.rows()), 0.0);
  std::vector<double> regRow(static_cast<std::size_t>(g.rows()), 0.0);
  double minJ = std::numeric_limits<double>::infinity();
#pragma omp parallel for schedule(static) reduction(min : minJ)
  for (Index row = 0; row < g.rows(); ++row) {
    const Index z = row / g.ny, y = row % g.ny;
    double dataSum = 0.0, regSum = 0.0;
    for (Index x = 0; x < g.nx; ++x) {
      const Index v = row * g.nx + x;
      // Data term at x: sample point x - u(x).
      const Sample s = sampleTrilinear(moving, g, samplePoint(u, z, y, x), buffers != nullptr);
      const double r = s.value - double(fixed(z, y, x));
      dataSum += 0.5 * r * r;
      // Regulariser at x.
      const Deformation d = deformation(displacementGradient(u, g, z, y, x));
      regSum += phi(d.J);
      minJ = std::min(minJ, d.J);
      if (buffers) {
        double* fd = &buffers->data[static_cast<std::size_t>(3 * v)];
        for (int i = 0; i < 3; ++i) fd[i] = r * s.gradient[i];
        double* W = &buffers->stress[static_cast<std::size_t>(9 * v)];
        const double scale = d.J > 0.0 ? phiPrime(d.J) : 0.0;  // folded voxel: no stress
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 3; ++j) W[3 * i + j] = scale * d.cofactor(i, j);
      }
    }
    dataRow[static_cast<std::size_t>(row)] = dataSum;
    regRow[static_cast<std::size_t>(row)] = regSum;
  }
  double data = 0.0, reg = 0.0;
  for (Index row = 0; row < g.rows(); ++row) {
    data += dataRow[static_cast<std::size_t>(row)];
    reg += regRow[static_cast<std::size_t>(row)];
  }
  return finishEnergy(data, reg, static_cast<float>(minJ), lambda);
}

// (D^T w)(i) along one axis for the stress entry k, i = the voxel's index on that axis.
// D^T w (i) = 1/2 [ w(i-1) [i > 0] - w(i) [i = 0] - w(i+1) [i < n-1] + w(i) [i = n-1] ].
inline double adjointDifference(const double* W, Index v, Index stride, Index i, Index n, int k) {
  const double here = W[9 * v + k];
  const double minus = i > 0 ? W[9 * (v - stride) + k] : -here;
  const double plus = i < n - 1 ? W[9 * (v + stride) + k] : -here;
  return 0.5 * (minus - plus);
}

RegistrationEnergy forcePass(ConstHostImageView const& moving, ConstHostImageView const& fixed,
                             ConstHostField const& u, HostField const& f, double lambda,
                             ForceBuffers& buffers) {
  const Grid g = gridOfImage(moving);
  const auto n = static_cast<std::size_t>(g.voxels());
  buffers.data.resize(3 * n);
  buffers.stress.resize(9 * n);
  const RegistrationEnergy e = energyPass(moving, fixed, u, lambda, &buffers);
  const double* W = buffers.stress.data();
  const double* fd = buffers.data.data();
#pragma omp parallel for schedule(static)
  for (Index row = 0; row < g.rows(); ++row) {
    const Index z = row / g.ny, y = row % g.ny;
    for (Index x = 0; x < g.nx; ++x) {
      const Index v = row * g.nx + x;
      const Index pos[3] = {x, y, z};
      for (int i = 0; i < 3; ++i) {
        double reg = 0.0;
        for (int j = 0; j < 3; ++j)
          reg += adjointDifference(W, v, g.stride(j), pos[j], g.extent(j), 3 * i + j);
        f(i, z, y, x) = static_cast<float>(fd[3 * v + i] + lambda * reg);
      }
    }
  }
  return e;
}

// ---- smoothing, rate, update -----------------------------------------------------------------

void smoothPass(ConstHostField const& in, HostField const& out, float sigma) {
  const Grid g = gridOfField(in);
  const int r = smoothingRadius(sigma);
  std::vector<double> w(static_cast<std::size_t>(2 * r + 1));
  double sum = 0.0;
  for (int k = -r; k <= r; ++k) {
    w[static_cast<std::size_t>(k + r)] =
        std::exp(-double(k) * double(k) / (2.0 * double(sigma) * double(sigma)));
    sum += w[static_cast<std::size_t>(k + r)];
  }
  for (double& wk : w) wk /= sum;

  // Three passes (x, y, z), each over the three components in one parallel loop, through two
  // double buffers; the result is rounded to float once.
  const Index voxels = g.voxels();
  const float* src = in.data();
  float* dst = out.data();
  std::vector<double> a(static_cast<std::size_t>(3 * voxels)), b(a.size());
  // dst(v) = sum_k w_k src(v + k e_axis) over the taps inside the grid, v over the 3 components' voxels.
  auto pass = [&](auto const& read, int axis, auto const& write) {
    const Index len = g.extent(axis), stride = g.stride(axis);
#pragma omp parallel for schedule(static)
    for (Index row = 0; row < 3 * g.rows(); ++row) {
      const Index zy = row % g.rows();
      for (Index x = 0; x < g.nx; ++x) {
        const Index v = row * g.nx + x;
        const Index pos = axis == 0 ? x : (axis == 1 ? zy % g.ny : zy / g.ny);
        double s = 0.0;
        // Zero outside the grid (spec): only the taps that land inside.
        for (int k = std::max<Index>(-r, -pos); k <= std::min<Index>(r, len - 1 - pos); ++k)
          s += w[static_cast<std::size_t>(k + r)] * read(v + k * stride);
        write(v, s);
      }
    }
  };
  pass([&](Index i) { return double(src[i]); }, 0,
       [&](Index i, double s) { a[static_cast<std::size_t>(i)] = s; });
  pass([&](Index i) { return a[static_cast<std::size_t>(i)]; }, 1,
       [&](Index i, double s) { b[static_cast<std::size_t>(i)] = s; });
  pass([&](Index i) { return b[static_cast<std::size_t>(i)]; }, 2,
       [&](Index i, double s) { dst[i] = static_cast<float>(s); });
}

double ratePass(ConstHostField const& u, ConstHostField const& v, HostField const& rate) {
  const Grid g = gridOfField(u);
  double maxNorm2 = 0.0;
#pragma omp parallel for schedule(static) reduction(max : maxNorm2)
  for (Index row = 0; row < g.rows(); ++row) {
    const Index z = row / g.ny, y = row % g.ny;
    for (Index x = 0; x < g.nx; ++x) {
      const Vec3 vel(v(0, z, y, x), v(1, z, y, x), v(2, z, y, x));
      // Upwind gradient: along axis j the neighbour on the side the flow comes from.
      const Index nb[3][2] = {{detail::clampIndex(x - 1, g.nx), detail::clampIndex(x + 1, g.nx)},
                              {detail::clampIndex(y - 1, g.ny), detail::clampIndex(y + 1, g.ny)},
                              {detail::clampIndex(z - 1, g.nz), detail::clampIndex(z + 1, g.nz)}};
      Mat3 H = Mat3::Zero();
      for (int i = 0; i < 3; ++i) {
        const double c = u(i, z, y, x);
        if (vel[0] != 0.0) H(i, 0) = vel[0] > 0.0 ? c - u(i, z, y, nb[0][0]) : u(i, z, y, nb[0][1]) - c;
        if (vel[1] != 0.0) H(i, 1) = vel[1] > 0.0 ? c - u(i, z, nb[1][0], x) : u(i, z, nb[1][1], x) - c;
        if (vel[2] != 0.0) H(i, 2) = vel[2] > 0.0 ? c - u(i, nb[2][0], y, x) : u(i, nb[2][1], y, x) - c;
      }
      const Vec3 r = vel - H * vel;
      double norm2 = 0.0;
      for (int i = 0; i < 3; ++i) {
        const float ri = static_cast<float>(r[i]);
        rate(i, z, y, x) = ri;
        norm2 += double(ri) * double(ri);  // the norm of the rate that is applied
      }
      // Step norm (spec): max(|rate|, |v|_1 / 2), compared squared.
      const double courant = 0.5 * vel.cwiseAbs().sum();
      maxNorm2 = std::max({maxNorm2, norm2, courant * courant});
    }
  }
  return std::sqrt(maxNorm2);
}

void updatePass(ConstHostField const& u, ConstHostField const& rate, float dt, HostField const& out) {
  const Grid g = gridOfField(u);
  const Index total = 3 * g.rows();
#pragma omp parallel for schedule(static)
  for (Index row = 0; row < total; ++row) {
    const Index c = row / g.rows(), zy = row % g.rows(), z = zy / g.ny, y = zy % g.ny;
    for (Index x = 0; x < g.nx; ++x)
      out(c, z, y, x) =
          static_cast<float>(double(u(c, z, y, x)) + double(dt) * double(rate(c, z, y, x)));
  }
}

void jacobianPass(ConstHostField const& u, HostImageViewRW const& out) {
  const Grid g = gridOfField(u);
#pragma omp parallel for schedule(static)
  for (Index row = 0; row < g.rows(); ++row) {
    const Index z = row / g.ny, y = row % g.ny;
    for (Index x = 0; x < g.nx; ++x)
      out(z, y, x) = static_cast<float>(deformation(displacementGradient(u, g, z, y, x)).J);
  }
}

// Voxel of the smallest det J (first in memory order among equal values) and that value.
std::pair<Index, double> minimumJacobian(ConstHostField const& u) {
  const Grid g = gridOfField(u);
  Index best = 0;
  double bestJ = std::numeric_limits<double>::infinity();
  for (Index z = 0; z < g.nz; ++z)
    for (Index y = 0; y < g.ny; ++y)
      for (Index x = 0; x < g.nx; ++x) {
        const double J = deformation(displacementGradient(u, g, z, y, x)).J;
        if (J < bestJ) {
          bestJ = J;
          best = (z * g.ny + y) * g.nx + x;
        }
      }
  return {best, bestJ};
}

// Checks of the view-level entry points: images and u on one grid, u with 3 components.
Grid checkProblem(ConstHostImageView const& moving, ConstHostImageView const& fixed,
                  ConstHostField const& u, double lambda, const char* who) {
  const Grid g = checkImageView(moving, who, "moving");
  checkSameGrid(g, checkImageView(fixed, who, "fixed"), who, "fixed image", "moving image");
  checkSameGrid(g, checkField(u, who, "displacement"), who, "displacement field", "moving image");
  checkLambda(lambda, who);
  return g;
}

}  // namespace

// ---- public entry points -------------------------------------------------------------------

RegistrationEnergy registrationEnergy(ConstHostImageView moving, ConstHostImageView fixed,
                                      ConstHostField u, double lambda) {
  checkProblem(moving, fixed, u, lambda, "registrationEnergy");
  return energyPass(moving, fixed, u, lambda, nullptr);
}

RegistrationEnergy registrationForce(ConstHostImageView moving, ConstHostImageView fixed,
                                     ConstHostField u, HostField f, double lambda) {
  const char* who = "registrationForce";
  const Grid g = checkProblem(moving, fixed, u, lambda, who);
  checkSameGrid(g, checkField(f, who, "force"), who, "force field", "moving image");
  if (spansOverlap(f, u) || spansOverlap(f, moving) || spansOverlap(f, fixed))
    throw InvalidArgument(std::string(who) + ": the force field overlaps an input (in-place is not supported)");
  ForceBuffers buffers;
  return forcePass(moving, fixed, u, f, lambda, buffers);
}

void gaussianSmooth(ConstHostField in, HostField out, float sigma) {
  const char* who = "gaussianSmooth";
  const Grid g = checkField(in, who, "input");
  checkSameGrid(g, checkField(out, who, "output"), who, "output field", "input field");
  checkSigma(sigma, who);
  if (spansOverlap(in, out))
    throw InvalidArgument(std::string(who) + ": input and output fields overlap (in-place is not supported)");
  smoothPass(in, out, sigma);
}

double updateRate(ConstHostField u, ConstHostField v, HostField rate) {
  const char* who = "updateRate";
  const Grid g = checkField(u, who, "displacement");
  checkSameGrid(g, checkField(v, who, "velocity"), who, "velocity field", "displacement field");
  checkSameGrid(g, checkField(rate, who, "rate"), who, "rate field", "displacement field");
  if (spansOverlap(rate, u) || spansOverlap(rate, v))
    throw InvalidArgument(std::string(who) + ": the rate field overlaps an input (in-place is not supported)");
  return ratePass(u, v, rate);
}

void applyUpdate(ConstHostField u, ConstHostField rate, float dt, HostField uOut) {
  const char* who = "applyUpdate";
  const Grid g = checkField(u, who, "displacement");
  checkSameGrid(g, checkField(rate, who, "rate"), who, "rate field", "displacement field");
  checkSameGrid(g, checkField(uOut, who, "output"), who, "output field", "displacement field");
  if (!std::isfinite(dt))
    throw InvalidArgument(std::string(who) + ": time step must be finite, got " + number(dt));
  // Element-wise: uOut may be u itself, but not a shifted view of u or rate.
  if ((spansOverlap(uOut, u) && uOut.data() != u.data()) || spansOverlap(uOut, rate))
    throw InvalidArgument(std::string(who) + ": the output field partially overlaps an input");
  updatePass(u, rate, dt, uOut);
}

void jacobianDeterminant(ConstHostField u, ImageView<Kokkos::HostSpace> out) {
  const char* who = "jacobianDeterminant";
  const Grid g = checkField(u, who, "displacement");
  checkSameGrid(g, checkImageView(out, who, "output"), who, "output image", "displacement field");
  if (spansOverlap(out, u))
    throw InvalidArgument(std::string(who) + ": the output image overlaps the displacement field");
  jacobianPass(u, out);
}

RegistrationResult fluidRegister(HostImage const& moving, HostImage const& fixed,
                                 VectorField<Kokkos::HostSpace>& u, RegistrationParams const& params,
                                 RegistrationProgress const& progress) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed = [&start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  const char* who = "fluidRegister";

  // ---- inputs
  checkImage(moving, who);
  checkImage(fixed, who);
  // Extents only: the parameters and the finiteness of the inputs are checked where the job
  // enters the pipeline (pipeline/Register.hpp).
  const Grid g = checkProblem(moving.data, fixed.data, u.data, params.lambda, who);
  if (moving.geometry.dimension != 3 || g.nx < RegistrationParams::kMinExtent ||
      g.ny < RegistrationParams::kMinExtent || g.nz < RegistrationParams::kMinExtent)
    throw InvalidArgument(std::string(who) + ": a 3D grid with every extent >= " +
                          std::to_string(RegistrationParams::kMinExtent) + " is needed, got " +
                          describe(moving.geometry));

  const ConstHostImageView T = moving.data, R = fixed.data;
  const HostField field = u.data;
  RegistrationResult result;
  result.initial = energyPass(T, R, field, params.lambda, nullptr);
  if (result.initial.folded()) {
    const auto [v, J] = minimumJacobian(field);
    const Index x = v % g.nx, y = (v / g.nx) % g.ny, z = v / (g.nx * g.ny);
    throw InvalidArgument(std::string(who) +
                          ": the initial displacement field folds space: det(I - grad u) = " +
                          number(J) + " <= 0 at voxel " + voxelString(x, y, z) +
                          "; start from a field with det J > 0 everywhere (e.g. zero)");
  }
  result.final = result.initial;
  result.stop = StopReason::IterationCap;
  if (params.iterations == 0) {
    result.seconds = elapsed();
    return result;
  }

  // ---- workspace
  const Index nz = g.nz, ny = g.ny, nx = g.nx;
  HostField force("kortex::ref::Registration::force", 3, nz, ny, nx);
  HostField velocity("kortex::ref::Registration::velocity", 3, nz, ny, nx);
  HostField rate("kortex::ref::Registration::rate", 3, nz, ny, nx);
  HostField candidate("kortex::ref::Registration::candidate", 3, nz, ny, nx);
  ForceBuffers buffers;

  RegistrationEnergy current = result.initial;
  double delta = params.maxStep;
  int smallSteps = 0;  // accepted steps in a row with a relative decrease below the tolerance
  bool stopped = false;
  const double pi = std::acos(-1.0);

  for (int it = 1; it <= params.iterations && !stopped; ++it) {
    RegistrationIteration record;
    record.iteration = it;
    ++result.iterations;

    forcePass(T, R, field, force, params.lambda, buffers);
    smoothPass(force, velocity, params.sigma);
    const double m = ratePass(field, velocity, rate);
    if (!std::isfinite(m))
      throw std::runtime_error(std::string(who) + ": the update rate is not finite at iteration " +
                               std::to_string(it) + " (force overflow near a nearly folded voxel)");
    // The schedule's cap on the step: maxStep at the first iteration, half a cosine down to ~0 at the
    // iteration cap (float, as the step is held).
    const double cap = double(static_cast<float>(double(params.maxStep) * 0.5 *
                                                 (1.0 + std::cos(pi * double(it - 1) / double(params.iterations)))));
    delta = std::min(delta, cap);

    if (m == 0.0) {
      record.step = static_cast<float>(delta);
      result.stop = StopReason::ZeroVelocity;
      stopped = true;
    } else {
      for (;;) {
        record.step = static_cast<float>(delta);
        const float dt = static_cast<float>(delta / m);
        updatePass(field, rate, dt, candidate);
        const RegistrationEnergy trial = energyPass(T, R, candidate, params.lambda, nullptr);
        if (!trial.folded() && trial.total < current.total) {
          const double relative = (current.total - trial.total) / current.total;
          Kokkos::deep_copy(field, candidate);
          current = trial;
          record.accepted = true;
          ++result.accepted;
          delta = std::min(2.0 * delta, cap);  // regrowth up to the schedule (spec)
          smallSteps = relative < params.tolerance ? smallSteps + 1 : 0;
          if (smallSteps >= params.patience) {
            result.stop = StopReason::Converged;
            stopped = true;
          }
          break;
        }
        ++record.rejected;
        ++result.rejected;
        delta *= 0.5;
        if (delta < double(params.minStep)) {
          result.stop = StopReason::StepUnderflow;
          stopped = true;
          break;
        }
      }
    }
    if (!stopped && it == params.iterations) result.stop = StopReason::IterationCap;

    record.energy = current;
    record.seconds = elapsed();
    result.history.push_back(record);
    if (progress) progress(record);
  }

  result.final = current;
  result.seconds = elapsed();
  return result;
}

}  // namespace kortex::ref
