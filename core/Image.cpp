#include "core/Image.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "core/Errors.hpp"
#include <sstream>

namespace kortex {

bool Geometry::sameGrid(Geometry const& o, double tol) const {
  if (dimension != o.dimension || size != o.size) return false;
  for (int i = 0; i < 3; ++i) {
    const double s = std::max(std::abs(spacing[i]), 1e-12);
    // Written as !(<=) so that a NaN anywhere makes the grids differ.
    if (!(std::abs(spacing[i] - o.spacing[i]) <= tol * s)) return false;
    if (!(std::abs(origin[i] - o.origin[i]) <= tol * s)) return false;
  }
  for (int i = 0; i < 9; ++i)
    if (!(std::abs(direction[i] - o.direction[i]) <= tol)) return false;
  return true;
}

namespace {
template <std::size_t N>
std::string listed(std::array<double, N> const& v) {
  std::ostringstream os;
  os.precision(9);
  os << "(";
  for (std::size_t i = 0; i < N; ++i) {
    os << (i ? ", " : "");
    if (std::isnan(v[i]))
      os << "nan";  // never "-nan"
    else
      os << v[i] + 0.0;  // + 0.0: no "-0"
  }
  os << ")";
  return os.str();
}
}  // namespace

void Geometry::requireFinitePlacement(std::array<double, 3> const& origin, std::array<double, 9> const& direction) {
  for (double v : origin)
    if (!std::isfinite(v)) throw InvalidArgument("image origin must be finite, got " + listed(origin));
  for (double v : direction)
    if (!std::isfinite(v)) throw InvalidArgument("image direction must be finite, got " + listed(direction));
}

void Geometry::validate() const {
  if (dimension != 2 && dimension != 3)
    throw InvalidArgument("image dimension must be 2 or 3, got " + std::to_string(dimension));
  for (int i = 0; i < 3; ++i)
    if (size[i] <= 0)
      throw InvalidArgument("image has zero size (" + std::to_string(size[0]) + "x" +
                            std::to_string(size[1]) + "x" + std::to_string(size[2]) + ")");
  if (dimension == 2 && size[2] != 1)
    throw InvalidArgument("2D image must have nz == 1");
  for (int i = 0; i < 3; ++i)
    if (!(spacing[i] > 0.0) || !std::isfinite(spacing[i]))
      throw InvalidArgument("image spacing must be positive and finite");
  requireFinitePlacement(origin, direction);
  const auto& d = direction;
  const double det = d[0] * (d[4] * d[8] - d[5] * d[7]) - d[1] * (d[3] * d[8] - d[5] * d[6]) +
                     d[2] * (d[3] * d[7] - d[4] * d[6]);
  if (!(std::abs(det) > 1e-9)) throw InvalidArgument("image direction matrix is singular");
}

Geometry Geometry::make2D(Index nx, Index ny) {
  Geometry g;
  g.dimension = 2;
  g.size = {nx, ny, 1};
  return g;
}

Geometry Geometry::make3D(Index nx, Index ny, Index nz) {
  Geometry g;
  g.dimension = 3;
  g.size = {nx, ny, nz};
  return g;
}

Geometry Geometry::fromSize(Index nx, Index ny, Index nz) {
  return nz == 1 ? make2D(nx, ny) : make3D(nx, ny, nz);
}

std::array<double, 3> indexToWorld(Geometry const& g, std::array<double, 3> const& p) {
  std::array<double, 3> w{};
  for (int r = 0; r < 3; ++r) {
    w[r] = g.origin[r];
    for (int c = 0; c < 3; ++c) w[r] += g.direction[3 * r + c] * g.spacing[c] * p[c];
  }
  return w;
}

Matrix3 indexToWorldMatrix(Geometry const& g) {
  Matrix3 b{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) b[3 * i + j] = g.direction[3 * i + j] * g.spacing[j];
  return b;
}

double determinant3(Matrix3 const& a) {
  return a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) +
         a[2] * (a[3] * a[7] - a[4] * a[6]);
}

Matrix3 inverse3(Matrix3 const& a) {
  const double s = 1.0 / determinant3(a);
  return {(a[4] * a[8] - a[5] * a[7]) * s, (a[2] * a[7] - a[1] * a[8]) * s,
          (a[1] * a[5] - a[2] * a[4]) * s, (a[5] * a[6] - a[3] * a[8]) * s,
          (a[0] * a[8] - a[2] * a[6]) * s, (a[2] * a[3] - a[0] * a[5]) * s,
          (a[3] * a[7] - a[4] * a[6]) * s, (a[1] * a[6] - a[0] * a[7]) * s,
          (a[0] * a[4] - a[1] * a[3]) * s};
}

std::string describe(Geometry const& g) {
  std::ostringstream os;
  os << g.dimension << "D " << g.size[0] << "x" << g.size[1];
  if (g.dimension == 3) os << "x" << g.size[2];
  os << ", spacing " << g.spacing[0] << "x" << g.spacing[1];
  if (g.dimension == 3) os << "x" << g.spacing[2];
  os << " mm";
  return os.str();
}

void requireFinite(HostImage const& img, std::string const& what) {
  const float* p = img.data.data();
  const long long n = static_cast<long long>(img.data.size());
  long long first = std::numeric_limits<long long>::max();
#pragma omp parallel for reduction(min : first) schedule(static) if (n > (1 << 16))
  for (long long i = 0; i < n; ++i)
    if (!std::isfinite(p[i]) && i < first) first = i;
  if (first == std::numeric_limits<long long>::max()) return;
  const long long nx = img.data.extent(2), ny = img.data.extent(1);
  throw InvalidArgument(what + " contains a NaN or Inf voxel at (x=" + std::to_string(first % nx) +
                        ", y=" + std::to_string(first / nx % ny) + ", z=" +
                        std::to_string(first / (nx * ny)) + "); the filters are not defined for non-finite values");
}

}  // namespace kortex
