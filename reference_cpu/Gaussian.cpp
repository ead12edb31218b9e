#include "reference_cpu/Gaussian.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <vector>

#include "core/Errors.hpp"

namespace kortex::ref {
namespace {

// Largest root magnitude of z^3 - a1 z^2 - a2 z - a3 (the causal filter's poles), by
// Durand-Kerner iteration.
double slowestPole(double a1, double a2, double a3) {
  using C = std::complex<double>;
  C z[3] = {C(0.4, 0.9), C(0.4, 0.9) * C(0.4, 0.9), C(0.4, 0.9) * C(0.4, 0.9) * C(0.4, 0.9)};
  auto p = [&](C x) { return x * x * x - a1 * x * x - a2 * x - a3; };
  for (int it = 0; it < 500; ++it)
    for (int i = 0; i < 3; ++i) {
      C den = 1.0;
      for (int k = 0; k < 3; ++k)
        if (k != i) den *= (z[i] - z[k]);
      z[i] -= p(z[i]) / den;
    }
  return std::max({std::abs(z[0]), std::abs(z[1]), std::abs(z[2])});
}

void recursiveLine(std::vector<double>& line, RecursiveGaussianCoefficients const& c, int pad) {
  const int n = int(line.size());
  std::vector<double> x(n + 2 * pad);
  for (int i = 0; i < n + 2 * pad; ++i) x[i] = line[std::clamp(i - pad, 0, n - 1)];
  const int m = int(x.size());
  std::vector<double> w(m), y(m);
  for (int i = 0; i < m; ++i) {
    auto W = [&](int k) { return k >= 0 ? w[k] : x[0]; };
    w[i] = c.B * x[i] + c.a[0] * W(i - 1) + c.a[1] * W(i - 2) + c.a[2] * W(i - 3);
  }
  for (int i = m - 1; i >= 0; --i) {
    auto Y = [&](int k) { return k < m ? y[k] : x[m - 1]; };
    y[i] = c.B * w[i] + c.a[0] * Y(i + 1) + c.a[1] * Y(i + 2) + c.a[2] * Y(i + 3);
  }
  for (int i = 0; i < n; ++i) line[i] = y[i + pad];
}

void separableLine(std::vector<double>& line, std::vector<double> const& g) {
  const int n = int(line.size()), r = int(g.size()) - 1;
  std::vector<double> out(n);
  for (int i = 0; i < n; ++i) {
    double s = 0.0;
    for (int k = -r; k <= r; ++k) s += g[std::abs(k)] * line[std::clamp(i + k, 0, n - 1)];
    out[i] = s;
  }
  line = out;
}

}  // namespace

int recursivePadding(double sigma) {
  const RecursiveGaussianCoefficients c = recursiveGaussianCoefficients(sigma);
  const double rho = slowestPole(c.a[0], c.a[1], c.a[2]);
  return int(std::ceil(std::log(1e-13) / std::log(rho))) + 3;
}

void gaussianBlur(ConstImageView<Kokkos::HostSpace> in, ImageView<Kokkos::HostSpace> out, GaussianParams const& params) {
  for (int k = 0; k < 3; ++k)
    if (in.extent(k) != out.extent(k)) throw InvalidArgument("gaussianBlur: input and output extents differ");
  if (in.size() == 0) throw InvalidArgument("gaussianBlur: empty image");
  const long nz = long(in.extent(0)), ny = long(in.extent(1)), nx = long(in.extent(2));
  std::vector<double> data(in.size());
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = in.data()[i];
  const bool rec = params.variant == GaussianVariant::Recursive;
  const RecursiveGaussianCoefficients c = rec ? recursiveGaussianCoefficients(params.sigma) : RecursiveGaussianCoefficients{};
  const int pad = rec ? recursivePadding(params.sigma) : 0;
  const std::vector<double> g = gaussianTaps(params.sigma);
  const long n[3] = {nx, ny, nz}, stride[3] = {1, nx, nx * ny};
  for (int axis = 0; axis < 3; ++axis) {
    if (n[axis] == 1) continue;
    const long lines = long(data.size()) / n[axis];
#pragma omp parallel for
    for (long l = 0; l < lines; ++l) {
      // Start of line l: the other two indices enumerated in memory order.
      long start;
      if (axis == 0) start = l * nx;
      else if (axis == 1) start = (l / nx) * nx * ny + (l % nx);
      else start = l;
      std::vector<double> line(n[axis]);
      for (long i = 0; i < n[axis]; ++i) line[i] = data[start + i * stride[axis]];
      if (rec) recursiveLine(line, c, pad);
      else separableLine(line, g);
      for (long i = 0; i < n[axis]; ++i) data[start + i * stride[axis]] = line[i];
    }
  }
  for (std::size_t i = 0; i < data.size(); ++i) out.data()[i] = float(data[i]);
}

}  // namespace kortex::ref
