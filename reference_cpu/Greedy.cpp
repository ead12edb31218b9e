#include "reference_cpu/Greedy.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/Errors.hpp"
#include "reference_cpu/Checks.hpp"
#include "reference_cpu/Gaussian.hpp"
#include "reference_cpu/Inverse.hpp"
#include "reference_cpu/detail/MutualInformation.hpp"
#include "reference_cpu/detail/Trilinear.hpp"
#include "reference_cpu/Registration.hpp"

namespace kortex::ref {
namespace {

// Views are passed by reference inside the OpenMP loops below: copying one there would update
// its reference count from several threads (not atomic in a Kokkos build without host threads).


struct Cell {
  Index i0, i1;
  double t;
};
// Corner indices and weight of a coordinate on an axis of n samples (clamp-extended).
Cell cell(double p, Index n) {
  const double q = std::min(std::max(p, -1.0), double(n));
  const double f = std::floor(q);
  return Cell{detail::clampIndex(Index(f), n), detail::clampIndex(Index(f) + 1, n), q - f};
}

// The clamp-extended trilinear interpolant at (px, py, pz) on an nx x ny x nz grid. Not
// detail/Trilinear.hpp's: the weights multiply z first and the point is clamped to [-1, n] before the
// floor, which the greedy reference's outputs are pinned to. The corners and weights are formed once
// per point; each sample (at(z, y, x) reads a voxel) sums them in the same order, so a field's three
// components cost one set of weights.
struct TrilinearPoint {
  Cell X, Y, Z;
  double w[8];
  TrilinearPoint(Index nx, Index ny, Index nz, double px, double py, double pz)
      : X(cell(px, nx)), Y(cell(py, ny)), Z(cell(pz, nz)) {
    int k = 0;
    for (int dz = 0; dz < 2; ++dz)
      for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx) w[k++] = (dz ? Z.t : 1 - Z.t) * (dy ? Y.t : 1 - Y.t) * (dx ? X.t : 1 - X.t);
  }
  template <class At>
  double operator()(At const& at) const {
    double s = 0.0;
    int k = 0;
    for (int dz = 0; dz < 2; ++dz)
      for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx) s += w[k++] * at(dz ? Z.i1 : Z.i0, dy ? Y.i1 : Y.i0, dx ? X.i1 : X.i0);
    return s;
  }
  // Component c of a field (3, nz, ny, nx).
  double operator()(ConstHostField const& u, int c) const {
    return (*this)([&](Index z, Index y, Index x) { return u(c, z, y, x); });
  }
};

template <class At>
double trilinear(At const& at, Index nx, Index ny, Index nz, double px, double py, double pz) {
  return TrilinearPoint(nx, ny, nz, px, py, pz)(at);
}

TrilinearPoint fieldPoint(ConstHostField const& u, double px, double py, double pz) {
  return TrilinearPoint(Index(u.extent(3)), Index(u.extent(2)), Index(u.extent(1)), px, py, pz);
}

void requireSameGrid3(std::size_t const* a, std::size_t const* b, const char* who) {
  for (int k = 0; k < 3; ++k)
    if (a[k] != b[k]) throw InvalidArgument(std::string(who) + ": inputs on different grids");
}

// A metric's inputs: W and the target on one grid, and (when given) the force field of 3 components
// on it too.
void requireMetricInputs(ConstHostImageView w, ConstHostImageView fixed, const char* who, HostField const* f = nullptr) {
  const std::size_t a[3] = {w.extent(0), w.extent(1), w.extent(2)};
  const std::size_t b[3] = {fixed.extent(0), fixed.extent(1), fixed.extent(2)};
  requireSameGrid3(a, b, who);
  if (!f) return;
  const std::size_t c[3] = {f->extent(1), f->extent(2), f->extent(3)};
  requireSameGrid3(a, c, who);
  if (f->extent(0) != 3) throw InvalidArgument(std::string(who) + ": the force field needs 3 components");
}

HostField makeField(const char* label, Index nz, Index ny, Index nx) { return HostField(std::string(label), 3, nz, ny, nx); }

// ---- LNCC: volumes of doubles, x fastest -----------------------------------------------------------

struct Grid3 {
  Index n[3];  // nx, ny, nz
  Index size() const { return n[0] * n[1] * n[2]; }
};

// The box sum along `axis` (0 = x, 1 = y, 2 = z): out(p) = sum_{o=-R..R} in(p + o e_axis), the
// coordinate clamped to the grid. `transposed`: its transpose, every in(p) added to each clamped
// position p + o e_axis it is read at. `out` (in.size() elements) is overwritten. Every output
// element receives its terms in the order (i along the axis, then o): along y and z the x rows are
// the inner loop (contiguous), each plane summed by one thread.
void boxAlong(std::vector<double> const& in, std::vector<double>& out, Grid3 const& g, int axis, int R,
              bool transposed) {
  const Index nx = g.n[0], ny = g.n[1], nz = g.n[2];
  if (axis == 0) {
#pragma omp parallel for
    for (Index l = 0; l < ny * nz; ++l) {
      const Index base = l * nx;
      double* to = &out[base];
      const double* from = &in[base];
      for (Index i = 0; i < nx; ++i) to[i] = 0.0;
      if (!transposed) {  // the interior without the clamp (the same terms in the same order)
        for (Index i = 0; i < nx; ++i) {
          double acc = to[i];
          if (i >= R && i + R < nx)
            for (int o = -R; o <= R; ++o) acc += from[i + o];
          else
            for (int o = -R; o <= R; ++o) acc += from[detail::clampIndex(i + o, nx)];
          to[i] = acc;
        }
        continue;
      }
      for (Index i = 0; i < nx; ++i)
        for (int o = -R; o <= R; ++o) to[detail::clampIndex(i + o, nx)] += from[i];
    }
    return;
  }
  // y: planes z, lines along y of stride nx; z: planes y, lines along z of stride nx ny.
  const Index len = axis == 1 ? ny : nz, step = axis == 1 ? nx : nx * ny;
  const Index planes = axis == 1 ? nz : ny, planeStride = axis == 1 ? nx * ny : nx;
#pragma omp parallel for
  for (Index q = 0; q < planes; ++q) {
    const Index base = q * planeStride;
    for (Index i = 0; i < len; ++i)
      for (Index x = 0; x < nx; ++x) out[base + i * step + x] = 0.0;
    for (Index i = 0; i < len; ++i)
      for (int o = -R; o <= R; ++o) {
        const Index j = detail::clampIndex(i + o, len);
        double* to = &out[base + (transposed ? j : i) * step];
        const double* from = &in[base + (transposed ? i : j) * step];
        for (Index x = 0; x < nx; ++x) to[x] += from[x];
      }
  }
}

// v <- its box sums along x, y, z (tmp: scratch of any content, resized to v's size).
void box3(std::vector<double>& v, std::vector<double>& tmp, Grid3 const& g, int R, bool transposed) {
  tmp.resize(v.size());
  for (int axis = 0; axis < 3; ++axis) {
    boxAlong(v, tmp, g, axis, R, transposed);
    v.swap(tmp);
  }
}

// The window sums and, per window, the coefficients a, a mF, a b, a b mW of the spec (B and C with
// the noise floor) and cc; returns E.
double lnccWindows(ConstHostImageView const& w, ConstHostImageView const& f, int R, Grid3 const& g,
                   LnccBuffers& b) {
  const Index n = g.size();
  std::vector<double>* const sums = b.sums;
  std::vector<double>* const coef = b.coef;
  for (int k = 0; k < 5; ++k) sums[k].resize(std::size_t(n));  // every element written below
#pragma omp parallel for
  for (Index i = 0; i < n; ++i) {
    const double a = w.data()[i], b = f.data()[i];
    sums[0][i] = a;
    sums[1][i] = b;
    sums[2][i] = a * a;
    sums[3][i] = b * b;
    sums[4][i] = a * b;
  }
  for (int k = 0; k < 5; ++k) box3(sums[k], b.tmp, g, R, false);
  const double N = std::pow(2.0 * R + 1.0, 3.0);
  for (int k = 0; k < 4; ++k) coef[k].resize(std::size_t(n));  // every element written below
  // E summed per z slice, then over the slices in order: the same value for any thread count.
  const Index slice = g.n[0] * g.n[1];
  std::vector<double> sliceEnergy(std::size_t(g.n[2]), 0.0);
#pragma omp parallel for
  for (Index z = 0; z < g.n[2]; ++z)
    for (Index i = z * slice; i < (z + 1) * slice; ++i) {
      const double mW = sums[0][i] / N, mF = sums[1][i] / N;
      const double floor = N * kLnccNoiseVariance;  // the spec's noise floor e on B and C
      const double A = sums[4][i] - N * mW * mF, B = sums[2][i] - N * mW * mW + floor, C = sums[3][i] - N * mF * mF + floor;
      sliceEnergy[std::size_t(z)] += A * A / (B * C);
      const double alpha = 2.0 * A / (B * C), beta = A / B;
      coef[0][i] = alpha;
      coef[1][i] = alpha * mF;
      coef[2][i] = alpha * beta;
      coef[3][i] = alpha * beta * mW;
    }
  double energy = 0.0;
  for (double e : sliceEnergy) energy += e;
  return energy;
}

}  // namespace

namespace {

// F(x) = s grad W(x) (clamped central differences, double, rounded to float once): the form of every
// metric's force.
void storeForce(HostField const& f, ConstHostImageView const& w, Index z, Index y, Index x, double s) {
  const Index nz = Index(w.extent(0)), ny = Index(w.extent(1)), nx = Index(w.extent(2));
  const double g[3] = {0.5 * (double(w(z, y, detail::clampIndex(x + 1, nx))) - w(z, y, detail::clampIndex(x - 1, nx))),
                       0.5 * (double(w(z, detail::clampIndex(y + 1, ny), x)) - w(z, detail::clampIndex(y - 1, ny), x)),
                       0.5 * (double(w(detail::clampIndex(z + 1, nz), y, x)) - w(detail::clampIndex(z - 1, nz), y, x))};
  for (int k = 0; k < 3; ++k) f(k, z, y, x) = float(s * g[k]);
}

}  // namespace

double lnccEnergy(ConstHostImageView w, ConstHostImageView fixed, int radius) {
  requireMetricInputs(w, fixed, "lnccEnergy");
  const Grid3 g{{Index(w.extent(2)), Index(w.extent(1)), Index(w.extent(0))}};
  LnccBuffers b;
  return lnccWindows(w, fixed, radius, g, b);
}

double lnccForce(ConstHostImageView w, ConstHostImageView fixed, int radius, HostField f) {
  LnccBuffers b;
  return lnccForce(w, fixed, radius, f, b);
}

double lnccForce(ConstHostImageView w, ConstHostImageView fixed, int radius, HostField f, LnccBuffers& b) {
  requireMetricInputs(w, fixed, "lnccForce", &f);
  if (radius < 1 || radius > kMaxLnccRadius) throw InvalidArgument("lnccForce: window radius out of range");
  const Grid3 g{{Index(w.extent(2)), Index(w.extent(1)), Index(w.extent(0))}};
  const double energy = lnccWindows(w, fixed, radius, g, b);
  std::vector<double>* const coef = b.coef;
  for (int k = 0; k < 4; ++k) box3(coef[k], b.tmp, g, radius, true);
  const Index nz = Index(w.extent(0)), ny = Index(w.extent(1)), nx = Index(w.extent(2));
#pragma omp parallel for
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        const std::size_t i = std::size_t((z * ny + y) * nx + x);
        // dE/dW(y) = sum over the windows x that read y of a(x) [(F(y) - mF(x)) - b(x) (W(y) - mW(x))].
        const double dEdW = double(fixed(z, y, x)) * coef[0][i] - coef[1][i] - double(w(z, y, x)) * coef[2][i] + coef[3][i];
        storeForce(f, w, z, y, x, dEdW);
      }
  return energy;
}

namespace {

using detail::MiBins;

// The MI of (fixed, w) over every voxel (core/Greedy.hpp "Metrics", Mi; core/MutualInformation.hpp):
// per-slice double histograms summed in slice order; L into `logRatio`.
double miHistogram(ConstHostImageView w, ConstHostImageView fixed, MiBins const& mb, std::vector<double>& logRatio) {
  const Index nz = Index(w.extent(0)), ny = Index(w.extent(1)), nx = Index(w.extent(2)), B = mb.B;
  std::vector<std::vector<double>> slices(std::size_t(nz), std::vector<double>(std::size_t(B * B), 0.0));
#pragma omp parallel for schedule(dynamic, 1)
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) mb.add(slices[std::size_t(z)], fixed(z, y, x), w(z, y, x), 1.0);
  std::vector<double> h(std::size_t(B * B), 0.0);
  for (auto const& s : slices)
    for (std::size_t c = 0; c < h.size(); ++c) h[c] += s[c];
  return detail::miOfHistogram(h, double(nz) * double(ny) * double(nx), B, logRatio);
}

}  // namespace

double miEnergy(ConstHostImageView w, ConstHostImageView fixed, int bins) {
  requireMetricInputs(w, fixed, "miEnergy");
  validateMiBins(bins);
  std::vector<double> logRatio;
  return miHistogram(w, fixed, MiBins{bins}, logRatio);
}

double miForce(ConstHostImageView w, ConstHostImageView fixed, int bins, HostField f) {
  requireMetricInputs(w, fixed, "miForce", &f);
  validateMiBins(bins);
  const MiBins mb{bins};
  std::vector<double> logRatio;
  const double energy = miHistogram(w, fixed, mb, logRatio);
  const Index nz = Index(w.extent(0)), ny = Index(w.extent(1)), nx = Index(w.extent(2));
  const double scale = double(mb.B - 4) / (double(nz) * double(ny) * double(nx));
#pragma omp parallel for
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        const double dEdW = scale * mb.slope(fixed(z, y, x), w(z, y, x), logRatio);  // (B - 4) h / N
        storeForce(f, w, z, y, x, dEdW);
      }
  return energy;
}

void greedyForce(ConstHostImageView w, ConstHostImageView fixed, HostField f) {
  requireMetricInputs(w, fixed, "greedyForce", &f);
  const Index nz = Index(w.extent(0)), ny = Index(w.extent(1)), nx = Index(w.extent(2));
#pragma omp parallel for
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        const double r = double(fixed(z, y, x)) - double(w(z, y, x));
        storeForce(f, w, z, y, x, r);
      }
}

void greedyCompose(ConstHostField u, ConstHostField v, float eps, HostField out) {
  for (int k = 0; k < 4; ++k)
    if (u.extent(k) != v.extent(k) || u.extent(k) != out.extent(k))
      throw InvalidArgument("greedyCompose: fields of different extents");
  if (u.extent(0) != 3) throw InvalidArgument("greedyCompose: fields need 3 components");
  if (out.data() == u.data() || out.data() == v.data())
    throw InvalidArgument("greedyCompose: the output aliases an input");
  const Index nz = Index(u.extent(1)), ny = Index(u.extent(2)), nx = Index(u.extent(3));
#pragma omp parallel for
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        // The step is formed in float, as the spec's sample point: eps * v(x).
        const float d[3] = {eps * v(0, z, y, x), eps * v(1, z, y, x), eps * v(2, z, y, x)};
        const double px = double(float(x) + d[0]), py = double(float(y) + d[1]), pz = double(float(z) + d[2]);
        const TrilinearPoint at = fieldPoint(u, px, py, pz);
        for (int c = 0; c < 3; ++c) out(c, z, y, x) = float(at(u, c) - d[c]);
      }
}

double fieldMaxNorm(ConstHostField v) {
  const std::size_t n = v.extent(1) * v.extent(2) * v.extent(3);
  double m = 0.0;
#pragma omp parallel for reduction(max : m)
  for (std::size_t i = 0; i < n; ++i) {
    const double a = v.data()[i], b = v.data()[n + i], c = v.data()[2 * n + i];
    m = std::max(m, std::sqrt(a * a + b * b + c * c));
  }
  return m;
}

double imageRmse(ConstHostImageView a, ConstHostImageView b) {
  double s = 0.0;
  const std::size_t n = a.size();
#pragma omp parallel for reduction(+ : s)
  for (std::size_t i = 0; i < n; ++i) {
    const double d = double(a.data()[i]) - b.data()[i];
    s += d * d;
  }
  return std::sqrt(s / double(n));
}

HostImage downsampleImage(HostImage const& in, int factor) {
  const Geometry& g = in.geometry;
  if (factor < 1 || g.nx() % factor || g.ny() % factor || g.nz() % factor)
    throw InvalidArgument("downsampleImage: factor " + std::to_string(factor) + " does not divide " + describe(g));
  HostImage out("greedy scale image", scaledGeometry(g, factor));
  if (factor == 1) {
    Kokkos::deep_copy(out.data, in.data);
    return out;
  }
  HostImage blurred("greedy blurred", g);
  gaussianBlur(in.data, blurred.data, GaussianParams{double(scaleSigma(factor)), GaussianVariant::Recursive});
  ConstHostImageView b = blurred.data;
  const Index nbx = Index(b.extent(2)), nby = Index(b.extent(1)), nbz = Index(b.extent(0));
  const double shift = 0.5 * (factor - 1);
  const Index nz = out.geometry.nz(), ny = out.geometry.ny(), nx = out.geometry.nx();
#pragma omp parallel for
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x)
        out.data(z, y, x) = float(trilinear(b, nbx, nby, nbz, factor * x + shift, factor * y + shift, factor * z + shift));
  return out;
}

void upsampleField(ConstHostField in, int from, int to, HostField out) {
  if (in.extent(0) != 3 || out.extent(0) != 3) throw InvalidArgument("upsampleField: fields need 3 components");
  const double scale = double(from) / double(to);
  const double a = double(to) / double(from), b = (0.5 * (to - 1) - 0.5 * (from - 1)) / double(from);
  const Index nz = Index(out.extent(1)), ny = Index(out.extent(2)), nx = Index(out.extent(3));
#pragma omp parallel for
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        const TrilinearPoint at = fieldPoint(in, a * x + b, a * y + b, a * z + b);
        for (int c = 0; c < 3; ++c) out(c, z, y, x) = float(scale * at(in, c));
      }
}

SubjectScale enterScale(HostImage const& image, int factor, SubjectScale const& prev, int from, SubjectScaleLabels const& labels) {
  SubjectScale s;
  s.I = downsampleImage(image, factor);
  const Index nz = s.I.geometry.nz(), ny = s.I.geometry.ny(), nx = s.I.geometry.nx();
  s.u = makeField(labels.u, nz, ny, nx);
  s.v = makeField(labels.v, nz, ny, nx);
  if (from != 0) {
    upsampleField(prev.u, from, factor, s.u);
    upsampleField(prev.v, from, factor, s.v);
  }
  s.W = ImageView<Kokkos::HostSpace>(std::string(labels.W), nz, ny, nx);
  return s;
}

GreedyStepper::GreedyStepper(GreedyParams const& params, Index nz, Index ny, Index nx)
    : params_(params), force_(makeField("greedy force", nz, ny, nx)), cand_(makeField("greedy candidate", nz, ny, nx)),
      jac_("greedy jacobian", nz, ny, nx) {}

void GreedyStepper::computeForce(ConstHostImageView W, ConstHostImageView target) {
  if (params_.metric == GreedyMetric::Lncc)
    lnccForce(W, target, params_.lnccRadius, force_, lncc_);
  else if (params_.metric == GreedyMetric::Mi)
    miForce(W, target, params_.miBins, force_);
  else
    greedyForce(W, target, force_);
}

FluidSolveReport GreedyStepper::solve(HostField const& v, bool firstOfScale, bool coldStart) {
  GreedyParams const& p = params_;
  const bool residual = p.recordResidual;
  FluidSolveReport r;
  switch (greedySolveKind(p.solver, firstOfScale)) {
    case GreedySolveKind::Spectral: fluidSolveSpectral(p.fluid, force_, v, spectral_); break;
    case GreedySolveKind::SorCold:
      if (coldStart) Kokkos::deep_copy(v, 0.0f);
      r = fluidSolveSor(p.fluid, force_, v, p.coldSweeps, residual);
      break;
    case GreedySolveKind::SorWarm: r = fluidSolveSor(p.fluid, force_, v, p.warmSweeps, residual); break;
    case GreedySolveKind::Cg: r = fluidSolveCg(p.fluid, force_, v, p.cgMaxIterations, p.cgTolerance, residual); break;
  }
  if (residual && r.residual < 0.0) r.residual = fluidResidual(p.fluid, force_, v);
  return r;
}

float GreedyStepper::minJacobian(ConstHostField u) {
  jacobianDeterminant(u, jac_);
  float m = jac_(0, 0, 0);
  for (std::size_t i = 0; i < jac_.size(); ++i) m = std::min(m, jac_.data()[i]);
  return m;
}

GreedyStepOutcome GreedyStepper::step(HostField& u, ConstHostField v) {
  const double m = fieldMaxNorm(v);
  if (!(m > 0.0)) {
    GreedyStepOutcome zero;
    zero.zeroVelocity = true;
    return zero;
  }
  GreedyStepOutcome out = greedyStepWithFoldRefusal(params_, [&](float delta, GreedyStepOutcome& o) {
    greedyCompose(u, v, float(delta / m), cand_);
    o.minJacobian = minJacobian(cand_);
    return o.minJacobian > 0.0f ? GreedyTrial::Accepted : GreedyTrial::Folded;
  });
  if (out.accepted) std::swap(u, cand_);
  return out;
}

bool GreedyStepper::composeUnfolded(HostField& u, ConstHostField w) {
  greedyCompose(u, w, 1.0f, cand_);
  if (!(minJacobian(cand_) > 0.0f)) return false;
  std::swap(u, cand_);
  return true;
}

namespace {

// The mask of a scale: the minimum over each factor^3 block of the full-grid mask.
ImageView<Kokkos::HostSpace> maskAtScale(HostImage const& mask, int factor, Index nz, Index ny, Index nx) {
  ImageView<Kokkos::HostSpace> out("greedy force mask", nz, ny, nx);
  const auto m = mask.data;
  const Index mz = mask.geometry.nz(), my = mask.geometry.ny(), mx = mask.geometry.nx();
#pragma omp parallel for
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        float v = 1.0f;
        for (Index k = z * factor; k < std::min(mz, (z + 1) * factor); ++k)
          for (Index j = y * factor; j < std::min(my, (y + 1) * factor); ++j)
            for (Index i = x * factor; i < std::min(mx, (x + 1) * factor); ++i) v = std::min(v, m(k, j, i) != 0.0f ? 1.0f : 0.0f);
        out(z, y, x) = v;
      }
  return out;
}

// The nearest voxel of p in [0, n) (rounding half up, clamped to the grid).
Index nearestInGrid(double p, Index n) { return std::clamp(Index(std::floor(p + 0.5)), Index(0), n - 1); }

// f = 0 where the fixed mask is 0 or the moving mask is 0 at the nearest voxel of the point the
// deformation sends x to (x - u(x): the moving mask follows the registration). Either may be empty.
void maskForce(HostField const& f, ImageView<Kokkos::HostSpace> const& fixedMask,
               ImageView<Kokkos::HostSpace> const& movingMask, HostField const& u) {
  const Index nz = Index(f.extent(1)), ny = Index(f.extent(2)), nx = Index(f.extent(3));
#pragma omp parallel for
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        bool keep = fixedMask.data() == nullptr || fixedMask(z, y, x) != 0.0f;
        if (keep && movingMask.data() != nullptr)
          keep = movingMask(nearestInGrid(double(z) - double(u(2, z, y, x)), nz),
                            nearestInGrid(double(y) - double(u(1, z, y, x)), ny),
                            nearestInGrid(double(x) - double(u(0, z, y, x)), nx)) != 0.0f;
        if (!keep)
          for (int c = 0; c < 3; ++c) f(c, z, y, x) = 0.0f;
      }
}

}  // namespace

namespace {

// The symmetric mode's map (core/Greedy.hpp "Symmetric mode"): u(x) = x - p + u_m(p), p = h_f^-1(x).
InverseStats midpointMap(HostField const& uMoving, HostField const& uFixed, VectorField<Kokkos::HostSpace>& u) {
  const Index nz = Index(uFixed.extent(1)), ny = Index(uFixed.extent(2)), nx = Index(uFixed.extent(3));
  HostField pre = makeField("greedy midpoint preimage", nz, ny, nx);
  const InverseStats stats = invertMap(uFixed, AffineTransform{}, pre, midpointInverseParams());
  const Index n[3] = {nx, ny, nz};
#pragma omp parallel for collapse(2)
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        const double p[3] = {pre(0, z, y, x), pre(1, z, y, x), pre(2, z, y, x)};
        const detail::TrilinearCell c = detail::clampedCell(n, p);
        const double q[3] = {double(x), double(y), double(z)};
        for (int a = 0; a < 3; ++a) {
          double um = 0.0;
          for (int cz = 0; cz < 2; ++cz)
            for (int cy = 0; cy < 2; ++cy)
              for (int cx = 0; cx < 2; ++cx)
                um += detail::cornerWeight(c, cx, cy, cz) * uMoving(a, cz ? c.hi[2] : c.lo[2], cy ? c.hi[1] : c.lo[1], cx ? c.hi[0] : c.lo[0]);
          u.data(a, z, y, x) = float(q[a] - p[a] + um);
        }
      }
  return stats;
}

// min det(I - grad u) over the grid (jacobianDeterminant's rule).
float minDeterminant(HostField const& u) {
  ImageView<Kokkos::HostSpace> jac("greedy jacobian", u.extent(1), u.extent(2), u.extent(3));
  jacobianDeterminant(u, jac);
  float lo = jac(0, 0, 0);
  for (std::size_t i = 0; i < jac.size(); ++i) lo = std::min(lo, jac.data()[i]);
  return lo;
}

// Whether the symmetric map of the two sides folds (min det <= 0; the last scale's replay).
bool midpointMapFolds(HostField const& uMoving, HostField const& uFixed, Geometry const& grid) {
  VectorField<Kokkos::HostSpace> map("greedy midpoint map", grid);
  midpointMap(uMoving, uFixed, map);
  return minDeterminant(map.data) <= 0.0f;
}

// One symmetric iteration (core/Greedy.hpp "Symmetric mode"): both forces and solves from the same
// state, then each side's step, each side warped when its step is kept.
GreedyStepOutcome symmetricIteration(GreedyStepper& stepper, SubjectScale& m, SubjectScale& f, bool firstOfScale,
                                     bool coldStart, FluidSolveReport& solve) {
  stepper.computeForce(m.W, f.W);
  solve = stepper.solve(m.v, firstOfScale, coldStart);
  stepper.computeForce(f.W, m.W);
  stepper.solve(f.v, firstOfScale, coldStart);
  const GreedyStepOutcome sm = stepper.step(m.u, m.v), sf = stepper.step(f.u, f.v);
  if (sm.accepted) warp(m.I.data, m.u, m.W);
  if (sf.accepted) warp(f.I.data, f.u, f.W);
  return symmetricOutcome(sm, sf);
}

}  // namespace

GreedyResult greedyRegister(HostImage const& moving, HostImage const& fixed, VectorField<Kokkos::HostSpace>& u,
                            GreedyParams const& params, GreedyProgress const& progress, HostImage const* forceMask,
                            HostImage const* movingMask) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed = [&start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  if (moving.data.extent(0) != fixed.data.extent(0) || moving.data.extent(1) != fixed.data.extent(1) ||
      moving.data.extent(2) != fixed.data.extent(2))
    throw InvalidArgument("greedyRegister: the moving and fixed images are on different grids");
  for (int f : params.scales)
    if (const std::string why = scaleMisfit(fixed.geometry, f); !why.empty())
      throw InvalidArgument("greedyRegister: " + why + " of " + describe(fixed.geometry));
  if (params.symmetric && (forceMask || movingMask))
    throw InvalidArgument("greedyRegister: the symmetric mode takes no cost-function masks");

  GreedyResult result;
  SubjectScale m, fs;  // the moving image's; in the symmetric mode the fixed image's
  int prevFactor = 0;
  // One scale from the previous one's state (m, fs, prevFactor); `checkMap`: the symmetric mode's
  // map checked after every accepted iteration (core/Greedy.hpp "Symmetric mode").
  auto runScale = [&](std::size_t s, bool checkMap) {
    const int f = params.scales[s];
    const auto scaleStart = elapsed();
    m = enterScale(moving, f, m, prevFactor, {"greedy u", "greedy v", "greedy warped"});
    if (params.symmetric) fs = enterScale(fixed, f, fs, prevFactor, {"greedy fixed u", "greedy fixed v", "greedy fixed warped"});
    const HostImage I1 = params.symmetric ? fs.I : downsampleImage(fixed, f);
    const Index nz = I1.geometry.nz(), ny = I1.geometry.ny(), nx = I1.geometry.nx();
    GreedyStepper stepper(params.symmetric ? symmetricSideParams(params) : params, nz, ny, nx);
    const ImageView<Kokkos::HostSpace> mask = forceMask ? maskAtScale(*forceMask, f, nz, ny, nx) : ImageView<Kokkos::HostSpace>();
    const ImageView<Kokkos::HostSpace> mmask = movingMask ? maskAtScale(*movingMask, f, nz, ny, nx) : ImageView<Kokkos::HostSpace>();
    warp(m.I.data, m.u, m.W);
    if (params.symmetric) warp(fs.I.data, fs.u, fs.W);
    auto target = [&] { return params.symmetric ? fs.W : I1.data; };  // what W is compared with
    const HostField keepM = checkMap ? makeField("greedy kept u", nz, ny, nx) : HostField();
    const HostField keepF = checkMap ? makeField("greedy fixed kept u", nz, ny, nx) : HostField();
    GreedyScaleResult sr;
    sr.factor = f;
    sr.rmseStart = imageRmse(m.W, target());
    sr.rmseEnd = sr.rmseStart;
    for (int it = 1; it <= params.iterations[s]; ++it) {
      GreedyIteration rec;
      rec.scale = int(s);
      rec.factor = f;
      rec.iteration = it;
      GreedyStepOutcome step;
      bool mapFolded = false;
      if (params.symmetric) {
        if (checkMap) {
          Kokkos::deep_copy(keepM, m.u);
          Kokkos::deep_copy(keepF, fs.u);
        }
        step = symmetricIteration(stepper, m, fs, it == 1, it == 1 && prevFactor == 0, rec.solve);
        if (checkMap && step.accepted && midpointMapFolds(m.u, fs.u, fixed.geometry)) {
          Kokkos::deep_copy(m.u, keepM);
          Kokkos::deep_copy(fs.u, keepF);
          step.accepted = false;
          mapFolded = true;
        }
      } else {
        stepper.computeForce(m.W, I1.data);
        if (forceMask || movingMask) maskForce(stepper.force(), mask, mmask, m.u);
        rec.solve = stepper.solve(m.v, it == 1, it == 1 && prevFactor == 0);
        step = stepper.step(m.u, m.v);
        if (step.accepted) warp(m.I.data, m.u, m.W);
      }
      sr.iterations = it;
      rec.refused = step.refused;
      result.refused += step.refused;
      if (step.accepted) {
        rec.minJacobian = step.minJacobian;
        rec.step = step.step;
        sr.rmseEnd = imageRmse(m.W, target());
      }
      if (step.zeroVelocity) sr.stop = GreedyStop::ZeroVelocity;
      if (!step.zeroVelocity && !step.accepted) sr.stop = mapFolded ? GreedyStop::MapFolded : GreedyStop::Folded;
      rec.rmse = sr.rmseEnd;
      rec.seconds = elapsed();
      result.history.push_back(rec);
      ++result.iterations;
      if (progress) progress(rec);
      if (!step.accepted) break;
    }
    sr.seconds = elapsed() - scaleStart;
    result.scales.push_back(sr);
    prevFactor = f;
  };
  SubjectScale mBefore, fsBefore;  // the last scale's starting point
  int factorBefore = 0;
  for (std::size_t s = 0; s < params.scales.size(); ++s) {
    mBefore = m;
    fsBefore = fs;
    factorBefore = prevFactor;
    runScale(s, false);
  }
  u = VectorField<Kokkos::HostSpace>("greedy displacement", fixed.geometry);
  if (params.symmetric) {
    result.midpointInverse = midpointMap(m.u, fs.u, u);
    result.minJacobian = minDeterminant(u.data);
    if (result.minJacobian <= 0.0f) {  // the last scale again, its map checked
      dropLastScale(result);
      m = mBefore;
      fs = fsBefore;
      prevFactor = factorBefore;
      runScale(params.scales.size() - 1, true);
      result.midpointInverse = midpointMap(m.u, fs.u, u);
      result.minJacobian = minDeterminant(u.data);
    }
  } else {
    Kokkos::deep_copy(u.data, m.u);
    result.minJacobian = minDeterminant(u.data);
  }
  result.seconds = elapsed();
  return result;
}

}  // namespace kortex::ref
