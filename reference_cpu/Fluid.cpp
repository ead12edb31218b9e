#include "reference_cpu/Fluid.hpp"

#include <Eigen/Dense>
#include <fftw3.h>

#include <cmath>
#include <complex>
#include <memory>
#include <mutex>
#include <vector>
#ifdef KORTEX_HAVE_FFTW_OMP
#include <omp.h>
#endif

#include "core/Errors.hpp"

namespace kortex::ref {
namespace {

// One entry of the operator's stencil: out_c(x) += coef * v_src(x + (dz, dy, dx)).
struct Tap {
  int src, dz, dy, dx;
  double coef;
};

// The stencil of output component c, from core/Fluid.hpp's discretisation.
std::vector<Tap> stencil(FluidParams const& p, int c) {
  std::vector<Tap> taps;
  int e[3][3] = {{0, 0, 1}, {0, 1, 0}, {1, 0, 0}};  // unit offsets (dz, dy, dx) of axes x, y, z
  taps.push_back({c, 0, 0, 0, 6.0 * p.alpha + p.gamma + 2.0 * p.beta});
  for (int j = 0; j < 3; ++j) {
    for (int s : {-1, 1}) {
      const double coef = -p.alpha - (j == c ? p.beta : 0.0);
      taps.push_back({c, s * e[j][0], s * e[j][1], s * e[j][2], coef});
    }
  }
  if (p.beta != 0.0) {
    for (int j = 0; j < 3; ++j) {
      if (j == c) continue;
      for (int sc : {-1, 1})
        for (int sj : {-1, 1})
          taps.push_back({j, sc * e[c][0] + sj * e[j][0], sc * e[c][1] + sj * e[j][1],
                          sc * e[c][2] + sj * e[j][2], -0.25 * p.beta * sc * sj});
    }
  }
  return taps;
}

inline int wrap(int i, int n) { return ((i % n) + n) % n; }

// The operator's symbol M(k) at frequency (kx, ky, kz) of an nx x ny x nz grid: sum over the taps of
// coef e^{i theta . d}, theta = 2 pi (kx/nx, ky/ny, kz/nz).
Eigen::Matrix3cd symbolAt(std::vector<Tap> const (&taps)[3], int kx, int ky, int kz, int nx, int ny, int nz) {
  const double twoPi = 2.0 * M_PI;
  const double th[3] = {twoPi * kx / nx, twoPi * ky / ny, twoPi * kz / nz};  // x, y, z
  Eigen::Matrix3cd M = Eigen::Matrix3cd::Zero();
  for (int c = 0; c < 3; ++c)
    for (Tap const& t : taps[c])
      M(c, t.src) += t.coef * std::exp(std::complex<double>(0.0, th[0] * t.dx + th[1] * t.dy + th[2] * t.dz));
  return M;
}

// Where beta = 0 every component's stencil reads only that component, with the same taps in the same
// order: M(k) = s(k) I, and the 3x3 solve is rhs / s(k) (FullPivLU of a scalar matrix divides each
// entry by the pivot: the same bits, tstFluid). s(k) is kept for the last grid and parameters solved
// (it depends on neither f nor v): the symbol's exponentials are formed once per scale, not per solve.
struct ScalarSymbol {
  int nz = 0, ny = 0, nx = 0;
  double alpha = 0, gamma = 0;
  std::vector<std::complex<double>> s;  // (kz, ky, kx), kx < nx / 2 + 1
};

std::shared_ptr<ScalarSymbol const> scalarSymbol(FluidParams const& p, std::vector<Tap> const (&taps)[3], int nz, int ny, int nx) {
  if (p.beta != 0.0) return nullptr;
  static std::mutex mutex;
  static std::shared_ptr<ScalarSymbol const> last;
  std::lock_guard<std::mutex> lock(mutex);
  if (last && last->nz == nz && last->ny == ny && last->nx == nx && last->alpha == p.alpha && last->gamma == p.gamma) return last;
  auto sym = std::make_shared<ScalarSymbol>();
  sym->nz = nz, sym->ny = ny, sym->nx = nx, sym->alpha = p.alpha, sym->gamma = p.gamma;
  const int nh = nx / 2 + 1;
  sym->s.resize(std::size_t(nz) * ny * nh);
#pragma omp parallel for
  for (int kz = 0; kz < nz; ++kz)
    for (int ky = 0; ky < ny; ++ky)
      for (int kx = 0; kx < nh; ++kx) sym->s[(std::size_t(kz) * ny + ky) * nh + kx] = symbolAt(taps, kx, ky, kz, nx, ny, nz)(0, 0);
  last = sym;
  return last;
}

void requireField(ConstHostField f, const char* what) {
  if (f.extent(0) != 3) throw InvalidArgument(std::string(what) + " must have 3 components");
  for (int a = 1; a < 4; ++a)
    if (f.extent(a) < std::size_t(kFluidMinExtent))
      throw InvalidArgument(std::string(what) + ": every extent must be >= " + std::to_string(kFluidMinExtent));
}

void requireSame(ConstHostField a, ConstHostField b) {
  for (int k = 0; k < 4; ++k)
    if (a.extent(k) != b.extent(k)) throw InvalidArgument("fluid solve: fields of different extents");
}

// out = L v in double.
void applyDouble(FluidParams const& p, std::vector<double> const& v, std::vector<double>& out, int nz,
                 int ny, int nx) {
  const std::size_t n = std::size_t(nz) * ny * nx;
  std::vector<Tap> taps[3] = {stencil(p, 0), stencil(p, 1), stencil(p, 2)};
#pragma omp parallel for
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x)
        for (int c = 0; c < 3; ++c) {
          double s = 0.0;
          for (Tap const& t : taps[c])
            s += t.coef * v[t.src * n + (std::size_t(wrap(z + t.dz, nz)) * ny + wrap(y + t.dy, ny)) * nx +
                            wrap(x + t.dx, nx)];
          out[c * n + (std::size_t(z) * ny + y) * nx + x] = s;
        }
}

std::vector<double> toDouble(ConstHostField f) {
  std::vector<double> d(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) d[i] = f.data()[i];
  return d;
}

double dot(std::vector<double> const& a, std::vector<double> const& b) {
  double s = 0.0;
#pragma omp parallel for reduction(+ : s)
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void fluidApply(FluidParams const& p, ConstHostField v, HostField out) {
  requireField(v, "fluid operator input");
  requireSame(v, out);
  const int nz = int(v.extent(1)), ny = int(v.extent(2)), nx = int(v.extent(3));
  std::vector<double> o(v.size());
  applyDouble(p, toDouble(v), o, nz, ny, nx);
  for (std::size_t i = 0; i < o.size(); ++i) out.data()[i] = float(o[i]);
}

double fluidResidual(FluidParams const& p, ConstHostField f, ConstHostField v) {
  requireField(v, "fluid solve field");
  requireSame(f, v);
  const int nz = int(v.extent(1)), ny = int(v.extent(2)), nx = int(v.extent(3));
  std::vector<double> lv(v.size());
  applyDouble(p, toDouble(v), lv, nz, ny, nx);
  double rr = 0.0, ff = 0.0;
  for (std::size_t i = 0; i < lv.size(); ++i) {
    const double r = double(f.data()[i]) - lv[i];
    rr += r * r;
    ff += double(f.data()[i]) * f.data()[i];
  }
  if (ff == 0.0) return rr == 0.0 ? 0.0 : std::sqrt(rr);
  return std::sqrt(rr / ff);
}

double fluidBilinear(FluidParams const& p, ConstHostField x, ConstHostField y) {
  requireField(x, "fluid operator input");
  requireSame(x, y);
  const int nz = int(x.extent(1)), ny = int(x.extent(2)), nx = int(x.extent(3));
  std::vector<double> ly(y.size());
  applyDouble(p, toDouble(y), ly, nz, ny, nx);
  return dot(toDouble(x), ly);
}

namespace {
// Plans made from here use the OpenMP threads (FFTW's planner is not thread-safe: inside a parallel
// region, one thread). Without libfftw3_omp, one thread.
void fftwUseThreads() {
#ifdef KORTEX_HAVE_FFTW_OMP
  static const bool initialised = fftw_init_threads() != 0;
  if (initialised) fftw_plan_with_nthreads(omp_in_parallel() ? 1 : omp_get_max_threads());
#endif
}
}  // namespace

// FFTW buffers and plans of one grid at one thread count.
struct SpectralWorkspace::Impl {
  int nz = 0, ny = 0, nx = 0, threads = 0;
  double* real = nullptr;
  fftw_complex* spec[3] = {nullptr, nullptr, nullptr};
  fftw_plan fwd = nullptr, inv = nullptr;

  void release() {
    if (fwd) fftw_destroy_plan(fwd);
    if (inv) fftw_destroy_plan(inv);
    fwd = inv = nullptr;
    for (auto*& c : spec) {
      if (c) fftw_free(c);
      c = nullptr;
    }
    if (real) fftw_free(real);
    real = nullptr;
    nz = ny = nx = threads = 0;
  }
  // Buffers and plans for (nz, ny, nx) at the current OpenMP thread count (made again when either changed).
  void prepare(int z, int y, int x) {
    const int t = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (real && z == nz && y == ny && x == nx && t == threads) return;
    release();
    const std::size_t n = std::size_t(z) * y * x, nc = std::size_t(z) * y * (x / 2 + 1);
    real = fftw_alloc_real(n);
    for (auto*& c : spec) c = fftw_alloc_complex(nc);
    fftwUseThreads();
    fwd = fftw_plan_dft_r2c_3d(z, y, x, real, spec[0], FFTW_ESTIMATE);
    inv = fftw_plan_dft_c2r_3d(z, y, x, spec[0], real, FFTW_ESTIMATE);
    nz = z;
    ny = y;
    nx = x;
    threads = t;
  }
  ~Impl() { release(); }
};

SpectralWorkspace::SpectralWorkspace() : impl_(std::make_unique<Impl>()) {}
SpectralWorkspace::~SpectralWorkspace() = default;
SpectralWorkspace::SpectralWorkspace(SpectralWorkspace&&) noexcept = default;
SpectralWorkspace& SpectralWorkspace::operator=(SpectralWorkspace&&) noexcept = default;

void fluidSolveSpectral(FluidParams const& p, ConstHostField f, HostField v) {
  SpectralWorkspace workspace;
  fluidSolveSpectral(p, f, v, workspace);
}

void fluidSolveSpectral(FluidParams const& p, ConstHostField f, HostField v, SpectralWorkspace& workspace) {
  requireField(f, "fluid solve right-hand side");
  requireSame(f, v);
  const int nz = int(f.extent(1)), ny = int(f.extent(2)), nx = int(f.extent(3));
  const int nh = nx / 2 + 1;
  const std::size_t n = std::size_t(nz) * ny * nx;
  SpectralWorkspace::Impl& w = *workspace.impl_;
  w.prepare(nz, ny, nx);
  double* const real = w.real;
  fftw_complex* const* spec = w.spec;
  for (int c = 0; c < 3; ++c) {
    for (std::size_t i = 0; i < n; ++i) real[i] = f.data()[c * n + i];
    fftw_execute_dft_r2c(w.fwd, real, spec[c]);
  }
  std::vector<Tap> taps[3] = {stencil(p, 0), stencil(p, 1), stencil(p, 2)};
  const std::shared_ptr<ScalarSymbol const> scalar = scalarSymbol(p, taps, nz, ny, nx);
#pragma omp parallel for
  for (int kz = 0; kz < nz; ++kz)
    for (int ky = 0; ky < ny; ++ky)
      for (int kx = 0; kx < nh; ++kx) {
        const std::size_t i = (std::size_t(kz) * ny + ky) * nh + kx;
        Eigen::Vector3cd rhs;
        for (int c = 0; c < 3; ++c) rhs(c) = std::complex<double>(spec[c][i][0], spec[c][i][1]);
        Eigen::Vector3cd sol;
        if (scalar)
          for (int c = 0; c < 3; ++c) sol(c) = rhs(c) / scalar->s[i];
        else
          sol = symbolAt(taps, kx, ky, kz, nx, ny, nz).fullPivLu().solve(rhs);
        for (int c = 0; c < 3; ++c) {
          spec[c][i][0] = sol(c).real() / double(n);
          spec[c][i][1] = sol(c).imag() / double(n);
        }
      }
  for (int c = 0; c < 3; ++c) {
    fftw_execute_dft_c2r(w.inv, spec[c], real);
    for (std::size_t i = 0; i < n; ++i) v.data()[c * n + i] = float(real[i]);
  }
}

FluidSolveReport fluidSolveSor(FluidParams const& p, ConstHostField f, HostField v, int sweeps, bool residual) {
  requireField(f, "fluid solve right-hand side");
  requireSame(f, v);
  const int nz = int(f.extent(1)), ny = int(f.extent(2)), nx = int(f.extent(3));
  if (const std::string why = sorUnsuitable(p, nz, ny, nx); !why.empty()) throw InvalidArgument(why);
  const double omega = sorOmega(p), diag = 6.0 * p.alpha + p.gamma;
  for (int s = 0; s < sweeps; ++s)
    for (int colour = 0; colour < 2; ++colour)
#pragma omp parallel for
      for (int z = 0; z < nz; ++z)
        for (int y = 0; y < ny; ++y)
          for (int x = (z + y + colour) % 2; x < nx; x += 2)
            for (int c = 0; c < 3; ++c) {
              const double nb = double(v(c, wrap(z - 1, nz), y, x)) + v(c, wrap(z + 1, nz), y, x) +
                                v(c, z, wrap(y - 1, ny), x) + v(c, z, wrap(y + 1, ny), x) +
                                v(c, z, y, wrap(x - 1, nx)) + v(c, z, y, wrap(x + 1, nx));
              const double gs = (double(f(c, z, y, x)) + p.alpha * nb) / diag;
              v(c, z, y, x) = float((1.0 - omega) * v(c, z, y, x) + omega * gs);
            }
  return FluidSolveReport{sweeps, residual ? fluidResidual(p, f, v) : -1.0};
}

FluidSolveReport fluidSolveCg(FluidParams const& p, ConstHostField f, HostField v, int maxIterations,
                              double tolerance, bool residual) {
  requireField(f, "fluid solve right-hand side");
  requireSame(f, v);
  const int nz = int(f.extent(1)), ny = int(f.extent(2)), nx = int(f.extent(3));
  std::vector<double> x = toDouble(v), b = toDouble(f), r(x.size()), q(x.size());
  applyDouble(p, x, q, nz, ny, nx);
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = b[i] - q[i];
  const double bb = dot(b, b);
  double rr = dot(r, r);
  std::vector<double> d = r;
  FluidSolveReport rep;
  auto relative = [&](double rr2) { return bb > 0.0 ? std::sqrt(rr2 / bb) : std::sqrt(rr2); };
  while (rep.iterations < maxIterations && relative(rr) > tolerance) {
    applyDouble(p, d, q, nz, ny, nx);
    const double alpha = rr / dot(d, q);
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] += alpha * d[i];
      r[i] -= alpha * q[i];
    }
    const double rrNew = dot(r, r);
    const double beta = rrNew / rr;
    rr = rrNew;
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = r[i] + beta * d[i];
    ++rep.iterations;
  }
  for (std::size_t i = 0; i < x.size(); ++i) v.data()[i] = float(x[i]);
  if (residual) rep.residual = fluidResidual(p, f, v);
  return rep;
}

}  // namespace kortex::ref
