// Affine pre-alignment: transforms, world matrices, pyramid, and the optimiser shared by every back
// end (specification: core/Affine.hpp).
#include "core/Affine.hpp"
#include "core/Apply.hpp"  // inverseAffine
#include "core/Boundary.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "core/Errors.hpp"

namespace kortex {

namespace {

using Mat3 = Matrix3;
using Vec3 = std::array<double, 3>;

Mat3 mul(Mat3 const& a, Mat3 const& b) {
  Mat3 r{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      r[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
  return r;
}

Vec3 mul(Mat3 const& a, Vec3 const& v) {
  return {a[0] * v[0] + a[1] * v[1] + a[2] * v[2], a[3] * v[0] + a[4] * v[1] + a[5] * v[2],
          a[6] * v[0] + a[7] * v[1] + a[8] * v[2]};
}

Mat3 inverse(Mat3 const& a, const char* what) {
  const double d = determinant3(a);
  if (!(std::abs(d) > 0.0) || !std::isfinite(d))
    throw InvalidArgument(std::string(what) + " is singular");
  return inverse3(a);
}

Vec3 add(Vec3 const& a, Vec3 const& b) { return {a[0] + b[0], a[1] + b[1], a[2] + b[2]}; }
Vec3 sub(Vec3 const& a, Vec3 const& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }

void checkVolume(HostImage const& img, const char* name) {
  Geometry const& g = img.geometry;
  g.validate();
  if (img.data.data() == nullptr || img.data.extent(0) != static_cast<std::size_t>(g.nz()) ||
      img.data.extent(1) != static_cast<std::size_t>(g.ny()) ||
      img.data.extent(2) != static_cast<std::size_t>(g.nx()))
    throw InvalidArgument(std::string(name) + ": data does not match its geometry (" + describe(g) + ")");
  if (g.dimension != 3)
    throw InvalidArgument(std::string("affine registration needs 3D images; the ") + name + " is " +
                          describe(g));
  for (int a = 0; a < 3; ++a)
    if (g.size[a] < AffineParams::kMinExtent)
      throw InvalidArgument(std::string("affine registration needs every extent >= ") +
                            std::to_string(AffineParams::kMinExtent) + "; the " + name + " is " +
                            describe(g));
}

// The grid of a binomial sampled every `stride` voxels (1: the same grid; 2: the next level).
Geometry affineReducedGeometryBy(Geometry const& g, Index stride) {
  Geometry out = g;
  for (int a = 0; a < 3; ++a) {
    out.size[a] = (g.size[a] + stride - 1) / stride;
    out.spacing[a] = double(stride) * g.spacing[a];
  }
  return out;
}

// RMS distance from the centre of the n samples 0 .. n-1 of an axis: sqrt((n^2 - 1) / 12).
double rmsRadius(Index n) {
  const double d = static_cast<double>(n);
  return std::sqrt((d * d - 1.0) / 12.0);
}

}  // namespace

// ---- transform -----------------------------------------------------------------------------------

std::array<double, 3> gridCentre(Geometry const& g) {
  return {0.5 * double(g.nx() - 1), 0.5 * double(g.ny() - 1), 0.5 * double(g.nz() - 1)};
}

AffineTransform AffineTransform::identity(Geometry const& fixed) {
  AffineTransform t;
  t.centre = gridCentre(fixed);
  return t;
}

std::array<double, 12> AffineTransform::parameters() const {
  std::array<double, 12> p{};
  for (int k = 0; k < 9; ++k) p[k] = matrix[k];
  for (int k = 0; k < 3; ++k) p[9 + k] = translation[k];
  return p;
}

void AffineTransform::setParameters(std::array<double, 12> const& theta) {
  for (int k = 0; k < 9; ++k) matrix[k] = theta[k];
  for (int k = 0; k < 3; ++k) translation[k] = theta[9 + k];
}

std::array<double, 3> AffineTransform::apply(std::array<double, 3> const& p) const {
  const Vec3 q = sub(p, centre);
  return add(add(mul(matrix, q), centre), translation);
}

double AffineTransform::determinant() const { return determinant3(matrix); }

std::ostream& operator<<(std::ostream& os, AffineTransform const& t) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "M [%.6f %.6f %.6f; %.6f %.6f %.6f; %.6f %.6f %.6f] t [%.4f %.4f %.4f]",
                t.matrix[0], t.matrix[1], t.matrix[2], t.matrix[3], t.matrix[4], t.matrix[5],
                t.matrix[6], t.matrix[7], t.matrix[8], t.translation[0], t.translation[1],
                t.translation[2]);
  return os << buf;
}

Matrix4 toWorldMatrix(AffineTransform const& t, Geometry const& fixed, Geometry const& moving) {
  const Mat3 bf = indexToWorldMatrix(fixed), bm = indexToWorldMatrix(moving);
  const Mat3 a = mul(mul(bm, t.matrix), inverse(bf, "the fixed image's direction * spacing"));
  // p_m = M p_f + b, b = c + t - M c
  const Vec3 b = sub(add(t.centre, t.translation), mul(t.matrix, t.centre));
  const Vec3 of{fixed.origin[0], fixed.origin[1], fixed.origin[2]};
  const Vec3 om{moving.origin[0], moving.origin[1], moving.origin[2]};
  const Vec3 off = sub(add(mul(bm, b), om), mul(a, of));
  return {a[0], a[1], a[2], off[0], a[3], a[4], a[5], off[1], a[6], a[7], a[8], off[2], 0, 0, 0, 1};
}

AffineTransform fromWorldMatrix(Matrix4 const& w, Geometry const& fixed, Geometry const& moving) {
  const Mat3 a{w[0], w[1], w[2], w[4], w[5], w[6], w[8], w[9], w[10]};
  const Vec3 off{w[3], w[7], w[11]};
  const Mat3 bf = indexToWorldMatrix(fixed);
  const Mat3 bmInv = inverse(indexToWorldMatrix(moving), "the moving image's direction * spacing");
  AffineTransform t;
  t.centre = gridCentre(fixed);
  t.matrix = mul(mul(bmInv, a), bf);
  const Vec3 of{fixed.origin[0], fixed.origin[1], fixed.origin[2]};
  const Vec3 om{moving.origin[0], moving.origin[1], moving.origin[2]};
  const Vec3 b = mul(bmInv, sub(add(mul(a, of), off), om));
  t.translation = add(sub(b, t.centre), mul(t.matrix, t.centre));
  return t;
}

namespace {

Matrix4 mul4(Matrix4 const& a, Matrix4 const& b) {
  Matrix4 r{};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 4; ++k) r[std::size_t(4 * i + j)] += a[std::size_t(4 * i + k)] * b[std::size_t(4 * k + j)];
  return r;
}

}  // namespace

Matrix4 affineMean(Matrix4 const& a, Matrix4 const& b) {
  const Matrix4 d = mul4(inverseAffine(a, "affine mean: the first map"), b);
  Matrix4 y = d, z{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  for (int k = 0; k < 100; ++k) {
    const Matrix4 yi = inverseAffine(y, "affine mean: the square root's iterate"),
                  zi = inverseAffine(z, "affine mean: the square root's iterate");
    double change = 0.0, size = 0.0;
    for (std::size_t i = 0; i < 16; ++i) {
      const double yn = 0.5 * (y[i] + zi[i]);
      change = std::max(change, std::abs(yn - y[i]));
      size = std::max(size, std::abs(yn));
      z[i] = 0.5 * (z[i] + yi[i]);
      y[i] = yn;
    }
    if (!std::isfinite(change)) break;
    if (change <= 1e-13 * size) return mul4(a, y);
  }
  throw InvalidArgument("affine mean: the square root of the two fits' difference did not converge");
}

AffineTransform initialTransform(Geometry const& fixed, Geometry const& moving) {
  const Matrix4 id{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  return fromWorldMatrix(id, fixed, moving);
}

AffineTransform indexToWorldTransform(Geometry const& g) {
  AffineTransform a;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) a.matrix[3 * i + j] = g.direction[3 * i + j] * g.spacing[j];
    a.translation[i] = g.origin[i];
  }
  return a;
}

AffineTransform worldToIndexTransform(Geometry const& g) {
  const Mat3 inv = inverse3(indexToWorldMatrix(g));
  AffineTransform r;
  for (int i = 0; i < 3; ++i) {
    double off = 0.0;
    for (int j = 0; j < 3; ++j) {
      r.matrix[3 * i + j] = inv[3 * i + j];
      off -= inv[3 * i + j] * g.origin[j];
    }
    r.translation[i] = off;
  }
  return r;
}

AffineTransform affineOfMatrix(Matrix4 const& m) {
  AffineTransform a;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) a.matrix[3 * i + j] = m[4 * i + j];
    a.translation[i] = m[4 * i + 3];
  }
  return a;
}

std::string itkTransformText(Matrix4 const& w) {
  std::ostringstream os;
  os.precision(17);
  os << "#Insight Transform File V1.0\n#Transform 0\nTransform: AffineTransform_double_3_3\nParameters:";
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) os << ' ' << w[4 * i + j];
  for (int i = 0; i < 3; ++i) os << ' ' << w[4 * i + 3];
  os << "\nFixedParameters: 0 0 0\n";
  return os.str();
}

double rmsMappedPointDistance(AffineTransform const& a, AffineTransform const& b, Geometry const& fixed) {
  double s = 0.0;
  for (Index z = 0; z < fixed.nz(); ++z)
    for (Index y = 0; y < fixed.ny(); ++y)
      for (Index x = 0; x < fixed.nx(); ++x) {
        const Vec3 p{double(x), double(y), double(z)};
        const Vec3 d = sub(a.apply(p), b.apply(p));
        s += d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
      }
  return std::sqrt(s / double(fixed.numVoxels()));
}

// ---- parameters ------------------------------------------------------------------------------------

void AffineParams::validate() const {
  if (levels < 1 || levels > kMaxLevels)
    throw InvalidArgument("affine levels must be in [1, " + std::to_string(kMaxLevels) + "], got " +
                          std::to_string(levels));
  if (iterationsPerLevel < 0)
    throw InvalidArgument("affine iterations per level must be >= 0, got " +
                          std::to_string(iterationsPerLevel));
  if (!(maxStep > 0.0) || !std::isfinite(maxStep))
    throw InvalidArgument("affine max step must be finite and > 0 voxels, got " + std::to_string(maxStep));
  if (!(minStep > 0.0) || !(minStep <= maxStep))
    throw InvalidArgument("affine min step must be in (0, max step], got " + std::to_string(minStep));
  validateMiBins(miBins);
  intensity.validate();
}

const char* toString(AffineMetricKind m) { return m == AffineMetricKind::Mi ? "mi" : "ncc"; }

AffineMetricKind parseAffineMetric(std::string const& s) {
  for (AffineMetricKind m : {AffineMetricKind::Ncc, AffineMetricKind::Mi})
    if (s == toString(m)) return m;
  throw InvalidArgument("affine metric must be ncc or mi, got '" + s + "'");
}


const char* toString(AffineDof d) {
  switch (d) {
    case AffineDof::Rigid: return "rigid";
    case AffineDof::Similarity: return "similarity";
    case AffineDof::Affine: return "affine";
  }
  return "?";
}

AffineDof parseAffineDof(std::string const& s) {
  for (AffineDof d : {AffineDof::Rigid, AffineDof::Similarity, AffineDof::Affine})
    if (s == toString(d)) return d;
  throw InvalidArgument("affine degrees of freedom must be rigid, similarity or affine, got '" + s + "'");
}

const char* toString(AffineStop s) {
  switch (s) {
    case AffineStop::MinStep: return "MinStep";
    case AffineStop::IterationCap: return "IterationCap";
    case AffineStop::ZeroGradient: return "ZeroGradient";
  }
  return "?";
}

AffineCoeffs affineCoeffs(AffineTransform const& t) {
  AffineCoeffs c{};
  for (int k = 0; k < 9; ++k) c.m[k] = t.matrix[k];
  for (int k = 0; k < 3; ++k) {
    c.t[k] = t.translation[k];
    c.c[k] = t.centre[k];
  }
  return c;
}

AffineMetric affineMetricFromSums(const double* s, Index fixedVoxels) {
  AffineMetric r;
  const double n = s[kAffineSumN];
  r.count = static_cast<Index>(s[kAffineSumInside]);
  r.overlap = fixedVoxels > 0 ? s[kAffineSumInside] / double(fixedVoxels) : 0.0;
  if (n < 2.0) return r;
  const double cov = s[kAffineSumFM] - s[kAffineSumF] * s[kAffineSumM] / n;
  const double vf = s[kAffineSumFF] - s[kAffineSumF] * s[kAffineSumF] / n;
  const double vm = s[kAffineSumMM] - s[kAffineSumM] * s[kAffineSumM] / n;
  if (!(vf > kAffineVarianceFloor * s[kAffineSumFF]) || !(vm > kAffineVarianceFloor * s[kAffineSumMM]))
    return r;
  const double inv = 1.0 / std::sqrt(vf * vm);
  r.value = cov * inv;
  for (int k = 0; k < 12; ++k) {
    const double s1 = s[kAffineSumParam + k], sf = s[kAffineSumParam + 12 + k],
                 sm = s[kAffineSumParam + 24 + k];
    const double dcov = sf - s[kAffineSumF] * s1 / n;
    const double dvmHalf = sm - s[kAffineSumM] * s1 / n;
    r.gradient[k] = dcov * inv - r.value * dvmHalf / vm;
  }
  return r;
}

// ---- pyramid -----------------------------------------------------------------------------------------

namespace {

// The 5-tap binomial (affineBinomial5) along x, y, z, clamp rule, sampled every `stride` voxels:
// n_out = ceil(n / stride); double passes, float output.
HostImage binomial(HostImage const& img, Index stride, const char* label) {
  Geometry const& g = img.geometry;
  const Index nx = g.nx(), ny = g.ny(), nz = g.nz();
  auto outExtent = [stride](Index n) { return (n + stride - 1) / stride; };
  const Index cx = outExtent(nx), cy = outExtent(ny), cz = outExtent(nz);
  // the five clamped taps (core/Boundary.hpp) of output i on an axis of n; axes hold fewer than 2^31 voxels
  auto taps = [stride](Index i, Index n, Index step, Index (&at)[5]) {
    for (int m = 0; m < 5; ++m) at[m] = Index(clampIndex(int(stride * i + m - 2), int(n))) * step;
  };
  const float* in = img.data.data();
  // x pass (nz, ny, cx), y pass (nz, cy, cx), z pass (cz, cy, cx).
  std::vector<double> tx(static_cast<std::size_t>(nz * ny * cx)), ty(static_cast<std::size_t>(nz * cy * cx));
#pragma omp parallel for schedule(static)
  for (Index r = 0; r < nz * ny; ++r) {
    const float* row = in + r * nx;
    for (Index i = 0; i < cx; ++i) {
      Index t[5];
      taps(i, nx, 1, t);
      tx[static_cast<std::size_t>(r * cx + i)] = affineBinomial5(row[t[0]], row[t[1]], row[t[2]], row[t[3]], row[t[4]]);
    }
  }
#pragma omp parallel for schedule(static)
  for (Index z = 0; z < nz; ++z)
    for (Index j = 0; j < cy; ++j) {
      Index t[5];
      taps(j, ny, cx, t);
      const double* p = tx.data() + z * ny * cx;
      double* o = ty.data() + (z * cy + j) * cx;
      for (Index i = 0; i < cx; ++i) o[i] = affineBinomial5(p[t[0] + i], p[t[1] + i], p[t[2] + i], p[t[3] + i], p[t[4] + i]);
    }
  HostImage out(label, affineReducedGeometryBy(g, stride));
  float* o = out.data.data();
  const Index plane = cy * cx;
#pragma omp parallel for schedule(static)
  for (Index k = 0; k < cz; ++k) {
    Index t[5];
    taps(k, nz, plane, t);
    for (Index i = 0; i < plane; ++i)
      o[k * plane + i] = static_cast<float>(
          affineBinomial5(ty[std::size_t(t[0] + i)], ty[std::size_t(t[1] + i)], ty[std::size_t(t[2] + i)],
                          ty[std::size_t(t[3] + i)], ty[std::size_t(t[4] + i)]));
  }
  return out;
}

}  // namespace

HostImage affineReduce(HostImage const& img) { return binomial(img, 2, "kortex::Affine::pyramid"); }

Geometry affineReducedGeometry(Geometry const& g) { return affineReducedGeometryBy(g, 2); }

HostImage affineSmooth(HostImage const& img) { return binomial(img, 1, "kortex::Affine::metricImage"); }

std::array<double, 3> centreOfMassWorld(HostImage const& img) {
  Geometry const& g = img.geometry;
  const float* p = img.data.data();
  // Per-slice sums on the threads, then added in slice order: the same bits for any thread count.
  std::vector<std::array<double, 4>> slice(static_cast<std::size_t>(g.nz()));
#pragma omp parallel for schedule(static)
  for (Index z = 0; z < g.nz(); ++z) {
    double w = 0.0, sx = 0.0, sy = 0.0;
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const double v = p[(z * g.ny() + y) * g.nx() + x];
        w += v;
        sx += v * double(x);
        sy += v * double(y);
      }
    slice[static_cast<std::size_t>(z)] = {w, sx, sy, w * double(z)};
  }
  double w = 0.0, sx = 0.0, sy = 0.0, sz = 0.0;
  for (auto const& s : slice) {
    w += s[0];
    sx += s[1];
    sy += s[2];
    sz += s[3];
  }
  if (!(w > 0.0)) throw InvalidArgument("centre of mass of an image whose intensities sum to <= 0");
  const Vec3 c{sx / w, sy / w, sz / w};
  return add(mul(indexToWorldMatrix(g), c), Vec3{g.origin[0], g.origin[1], g.origin[2]});
}

// ---- optimiser ------------------------------------------------------------------------------------------

namespace {

[[noreturn]] void throwNoOverlap(double overlap, int level) {
  std::ostringstream os;
  os.precision(3);
  os << "no overlap after alignment: only " << 100.0 * overlap
     << "% of the fixed voxels map inside the moving image" << (level > 0 ? " at pyramid level " : "")
     << (level > 0 ? std::to_string(level) : std::string()) << " (need >= " << 100.0 * kMinOverlap
     << "%); check the images' origins and orientations";
  throw InvalidArgument(os.str());
}

// +1 where det M > 0 means det A > 0 (A = B_m M B_f^-1 keeps orientation), -1 where the two grids'
// index frames are mirrored relative to each other.
double gridOrientation(Geometry const& fixed, Geometry const& moving) {
  return determinant3(indexToWorldMatrix(fixed)) * determinant3(indexToWorldMatrix(moving)) > 0.0 ? 1.0 : -1.0;
}

// The optimiser's parameters at the current transform (core/Affine.hpp, "Degrees of freedom"):
// Affine the 12 of theta; Rigid (w, t) and Similarity (w, sigma, t) by composition. `basis[p]` is
// dtheta / dp (12 entries), so the gradient is g_p = sum_k basis[p][k] g_k.
class LevelParameters {
 public:
  LevelParameters(AffineDof dof, Geometry const& fixedLevel, Geometry const& movingLevel)
      : dof_(dof), lm_(indexToWorldMatrix(movingLevel)), lmInv_(inverse3(lm_)) {
    for (int k = 0; k < 12; ++k) radius_[k] = k < 9 ? rmsRadius(fixedLevel.size[k % 3]) : 1.0;
  }
  int count() const { return parameterCount(dof_); }
  // Gradient and scales of the parameters at `t` from the metric's 12-vector gradient.
  void at(AffineTransform const& t, std::array<double, 12> const& g12, std::array<double, 12>& g,
          std::array<double, 12>& scale) const {
    if (dof_ == AffineDof::Affine) {  // the identity basis, without its exact zeros' arithmetic
      g = g12;
      scale = radius_;
      return;
    }
    std::array<std::array<double, 12>, 12> basis{};
    basisAt(t, basis);
    for (int p = 0; p < count(); ++p) {
      double gp = 0.0, s2 = 0.0;
      for (int k = 0; k < 12; ++k) {
        gp += basis[std::size_t(p)][std::size_t(k)] * g12[std::size_t(k)];
        s2 += (basis[std::size_t(p)][std::size_t(k)] * radius_[std::size_t(k)]) *
              (basis[std::size_t(p)][std::size_t(k)] * radius_[std::size_t(k)]);
      }
      g[std::size_t(p)] = gp;
      scale[std::size_t(p)] = std::sqrt(s2);
    }
  }
  // `t` moved by the parameter step d.
  AffineTransform moved(AffineTransform const& t, std::array<double, 12> const& d) const {
    AffineTransform c = t;
    if (dof_ == AffineDof::Affine) {
      std::array<double, 12> theta = t.parameters();
      for (int k = 0; k < 12; ++k) theta[std::size_t(k)] += d[std::size_t(k)];
      c.setParameters(theta);
      return c;
    }
    const double scaleStep = dof_ == AffineDof::Similarity ? std::exp(d[3]) : 1.0;
    const int t0 = dof_ == AffineDof::Similarity ? 4 : 3;
    Mat3 r = rotation({d[0], d[1], d[2]});
    for (double& v : r) v *= scaleStep;
    c.matrix = mul(mul(mul(lmInv_, r), lm_), t.matrix);
    for (int a = 0; a < 3; ++a) c.translation[std::size_t(a)] += d[std::size_t(t0 + a)];
    return c;
  }

 private:
  void basisAt(AffineTransform const& t, std::array<std::array<double, 12>, 12>& basis) const {
    if (dof_ == AffineDof::Affine) {
      for (int k = 0; k < 12; ++k) basis[std::size_t(k)][std::size_t(k)] = 1.0;
      return;
    }
    for (int k = 0; k < 3; ++k) {  // dM/dw_k = L_m^-1 [e_k]x L_m M
      Mat3 cross{};
      const int i = (k + 1) % 3, j = (k + 2) % 3;  // [e_k]x: +1 at (j, i), -1 at (i, j)
      cross[std::size_t(3 * j + i)] = 1.0;
      cross[std::size_t(3 * i + j)] = -1.0;
      const Mat3 dm = mul(mul(mul(lmInv_, cross), lm_), t.matrix);
      for (int e = 0; e < 9; ++e) basis[std::size_t(k)][std::size_t(e)] = dm[std::size_t(e)];
    }
    int next = 3;
    if (dof_ == AffineDof::Similarity) {  // dM/dsigma = M
      for (int e = 0; e < 9; ++e) basis[3][std::size_t(e)] = t.matrix[std::size_t(e)];
      next = 4;
    }
    for (int a = 0; a < 3; ++a) basis[std::size_t(next + a)][std::size_t(9 + a)] = 1.0;
  }
  // exp([w]x) (Rodrigues).
  static Mat3 rotation(Vec3 const& w) {
    const double th = std::sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2]);
    Mat3 r{1, 0, 0, 0, 1, 0, 0, 0, 1};
    if (th == 0.0) return r;
    const Vec3 k{w[0] / th, w[1] / th, w[2] / th};
    const Mat3 kx{0, -k[2], k[1], k[2], 0, -k[0], -k[1], k[0], 0};
    const Mat3 kx2 = mul(kx, kx);
    const double s = std::sin(th), c = 1.0 - std::cos(th);
    for (int e = 0; e < 9; ++e) r[std::size_t(e)] += s * kx[std::size_t(e)] + c * kx2[std::size_t(e)];
    return r;
  }

  AffineDof dof_;
  Mat3 lm_, lmInv_;
  std::array<double, 12> radius_{};
};

AffineLevelResult runLevel(AffineTransform& t, Geometry const& fixedLevel, Geometry const& movingLevel, double orientation,
                           AffineParams const& params, AffineMetricBackend& backend, int level,
                           AffineProgress const& progress, AffineMetric& last) {
  const auto start = std::chrono::steady_clock::now();
  AffineLevelResult lr;
  lr.level = level;
  lr.shrink = 1 << level;
  // Scales: M_ij moves voxels along axis i by q_j dM_ij; R_j = RMS of q_j over the grid (Affine;
  // the other parameters through their basis: LevelParameters).
  const LevelParameters space(params.dof, fixedLevel, movingLevel);
  const int np = space.count();
  std::array<double, 12> grad{}, scale{};

  AffineMetric cur = backend.evaluate(t);
  ++lr.evaluations;
  ++lr.batches;
  if (cur.overlap < kMinOverlap) throwNoOverlap(cur.overlap, level);
  lr.valueStart = cur.value;
  double step = params.maxStep;
  bool lastRejected = false;
  std::vector<AffineTransform> cands, toEvaluate;
  std::vector<char> orientable;
  std::vector<AffineMetric> metrics;
  for (;;) {
    if (lr.evaluations >= params.iterationsPerLevel) {
      lr.stop = AffineStop::IterationCap;
      break;
    }
    space.at(t, cur.gradient, grad, scale);
    double norm2 = 0.0;
    for (int k = 0; k < np; ++k) norm2 += (grad[k] / scale[k]) * (grad[k] / scale[k]);
    const double norm = std::sqrt(norm2);
    if (!(norm > 0.0) || !std::isfinite(norm)) {
      lr.stop = AffineStop::ZeroGradient;
      break;
    }
    // The candidates one-at-a-time evaluation would build from this theta: step, step/2, ... (one after
    // an accepted step, up to kAffineSpeculation after a rejection; see "Speculation").
    cands.clear();
    orientable.clear();
    toEvaluate.clear();
    double s = step;
    for (int i = 0; i < (lastRejected ? kAffineSpeculation : 1); ++i, s *= 0.5) {
      if (i > 0 && (s < params.minStep || lr.evaluations + int(toEvaluate.size()) >= params.iterationsPerLevel))
        break;
      std::array<double, 12> d{};
      for (int k = 0; k < np; ++k) d[k] = s * grad[k] / (scale[k] * scale[k] * norm);
      cands.push_back(space.moved(t, d));
      orientable.push_back(orientation * cands.back().determinant() > 0.0);  // no reflection in world space
      if (orientable.back()) toEvaluate.push_back(cands.back());
    }
    if (!toEvaluate.empty()) {
      backend.evaluateMany(toEvaluate, metrics);  // one candidate: evaluate, in every back end
      ++lr.batches;
    }
    // Replayed as one candidate at a time.
    bool accepted = false, stopped = false;
    std::size_t next = 0;
    for (std::size_t i = 0; i < cands.size() && !accepted; ++i) {  // (the list ends before the evaluation cap)
      if (orientable[i]) {
        const AffineMetric& cm = metrics[next++];
        ++lr.evaluations;
        if (cm.overlap >= kMinOverlap && cm.value > cur.value) {
          t = cands[i];
          cur = cm;
          accepted = true;
          ++lr.accepted;
        }
      }
      if (progress) progress(AffineIteration{level, lr.evaluations, cur.value, step, accepted});
      if (!accepted) {
        step *= 0.5;
        if (step < params.minStep) {
          lr.stop = AffineStop::MinStep;
          stopped = true;
          break;
        }
      }
    }
    if (stopped) break;
    lastRejected = !accepted;
  }
  lr.finalStep = step;
  lr.valueEnd = cur.value;
  lr.overlapEnd = cur.overlap;
  lr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  last = cur;
  return lr;
}

}  // namespace

namespace {

// min over [c - r, c + r] along one axis (clamped to the grid) of a 0 / 1 image: one axis of a box
// erosion.
HostImage minAlongAxis(HostImage const& in, int axis, int r) {
  HostImage out("kortex::Affine::mask", in.geometry);
  const Index n = in.geometry.size[axis];
  for (Index z = 0; z < in.geometry.nz(); ++z)
    for (Index y = 0; y < in.geometry.ny(); ++y)
      for (Index x = 0; x < in.geometry.nx(); ++x) {
        const Index c[3] = {x, y, z};
        float v = 1.0f;
        for (Index k = std::max<Index>(0, c[axis] - r); k <= std::min<Index>(n - 1, c[axis] + r) && v != 0.0f; ++k) {
          Index q[3] = {c[0], c[1], c[2]};
          q[axis] = k;
          v = std::min(v, in.data(q[2], q[1], q[0]));
        }
        out.data(z, y, x) = v;
      }
  return out;
}

}  // namespace

HostImage affineMaskLevel(HostImage const& finer, bool reduce) {
  if (!reduce) {
    HostImage out("kortex::Affine::mask", finer.geometry);
    for (Index i = 0; i < out.numVoxels(); ++i) out.data.data()[i] = finer.data.data()[i] != 0.0f ? 1.0f : 0.0f;
    return out;
  }
  HostImage out = affineReduce(finer);
  for (Index i = 0; i < out.numVoxels(); ++i) out.data.data()[i] = out.data.data()[i] >= 0.5f ? 1.0f : 0.0f;
  return out;
}

HostImage affineMetricMask(HostImage const& level, int radius) {
  HostImage out = level;
  for (int axis = 0; axis < 3; ++axis) out = minAlongAxis(out, axis, radius);
  return out;
}

Index affineMaskVoxels(HostImage const& mask) {
  Index n = 0;
  const float* m = mask.data.data();
  for (Index i = 0; i < mask.numVoxels(); ++i) n += m[i] != 0.0f;
  return n;
}

namespace {

// The masks' levels (empty where no mask), checked against their images' grids.
std::vector<HostImage> maskLevels(HostImage const& mask, HostImage const& image, int levels, const char* name) {
  if (mask.data.data() == nullptr) return std::vector<HostImage>(std::size_t(levels));
  if (!mask.geometry.sameGrid(image.geometry))
    throw InvalidArgument(std::string("the ") + name + " mask (" + describe(mask.geometry) + ") is not on the " + name +
                          " image's grid (" + describe(image.geometry) + ")");
  std::vector<HostImage> base{affineMaskLevel(mask, false)};
  if (affineMaskVoxels(base[0]) == 0) throw InvalidArgument(std::string("the ") + name + " mask is empty (no nonzero voxel)");
  for (int l = 1; l < levels; ++l) base.push_back(affineMaskLevel(base.back(), true));
  std::vector<HostImage> out;
  for (std::size_t l = 0; l < base.size(); ++l) out.push_back(affineMetricMask(base[l], l == 0 ? 3 : 1));
  return out;
}

}  // namespace

AffineResult affineOptimise(HostImage const& moving, HostImage const& fixed, AffineParams const& params,
                            AffineMetricBackend& backend, AffineProgress const& progress, AffineMasks const& masks) {
  const auto t0 = std::chrono::steady_clock::now();
  // The parameters are the job's to validate (pipeline/Register.hpp); the volumes must fit the
  // pyramid.
  checkVolume(moving, "moving image");
  checkVolume(fixed, "fixed image");

  AffineResult res;
  res.metric = params.metric;
  HostImage mN, fN;
  if (params.normalise) {
    mN = normaliseIntensity(moving, params.intensity, "moving image", &res.movingWindow);
    fN = normaliseIntensity(fixed, params.intensity, "fixed image", &res.fixedWindow);
  } else {  // normalised by the caller (finite, not constant)
    mN = moving;
    fN = fixed;
  }

  AffineTransform start = initialTransform(fixed.geometry, moving.geometry);
  if (params.centreOfMass) {
    Matrix4 w = toWorldMatrix(start, fixed.geometry, moving.geometry);
    auto shifted = [](HostImage const& img) {
      // Centre of mass of intensities shifted to >= 0 (normalised images already are).
      float mn = 0.0f;  // a minimum: the same for any thread count
      const float* p = img.data.data();
#pragma omp parallel for schedule(static) reduction(min : mn)
      for (Index i = 0; i < img.numVoxels(); ++i) mn = std::min(mn, p[i]);
      if (mn >= 0.0f) return centreOfMassWorld(img);
      HostImage s("kortex::Affine::comShift", img.geometry);
      for (Index i = 0; i < img.numVoxels(); ++i) s.data.data()[i] = static_cast<float>(double(p[i]) - double(mn));
      return centreOfMassWorld(s);
    };
    const auto cm = shifted(mN), cf = shifted(fN);
    for (int i = 0; i < 3; ++i) w[4 * i + 3] = cm[i] - cf[i];
    start = fromWorldMatrix(w, fixed.geometry, moving.geometry);
  }
  res.start = start;

  // The levels' grids: every extent, fixed and moving, stays >= kMinExtent.
  std::vector<Geometry> fg{fN.geometry}, mg{mN.geometry};
  while (int(fg.size()) < params.levels) {
    const Geometry f = affineReducedGeometry(fg.back()), m = affineReducedGeometry(mg.back());
    bool ok = true;
    for (int a = 0; a < 3; ++a) ok = ok && f.size[a] >= AffineParams::kMinExtent && m.size[a] >= AffineParams::kMinExtent;
    if (!ok) break;
    fg.push_back(f);
    mg.push_back(m);
  }
  const int levels = int(fg.size());
  res.levelsUsed = levels;
  const std::vector<HostImage> fm = maskLevels(masks.fixed, fixed, levels, "fixed"),
                               mm = maskLevels(masks.moving, moving, levels, "moving");
  // The levels' smoothed images (the metric's) where the back end does not build them.
  std::vector<HostImage> fs, ms;
  if (!backend.setPyramid(mN, fN, levels)) {
    HostImage f = fN, m = mN;
    for (int l = 0; l < levels; ++l) {
      if (l > 0) {
        f = affineReduce(f);
        m = affineReduce(m);
      }
      fs.push_back(affineSmooth(f));
      ms.push_back(affineSmooth(m));
    }
  }
  auto levelImages = [&](int l) {
    const std::size_t k = static_cast<std::size_t>(l);
    return AffineLevelImages{ms.empty() ? HostImage() : ms[k],
                             fs.empty() ? HostImage() : fs[k],
                             mm[k],
                             fm[k],
                             fm[k].data.data() ? affineMaskVoxels(fm[k]) : fg[k].numVoxels(),
                             params.metric,
                             params.miBins,
                             l};
  };
  backend.setImages(levelImages(0));
  int loaded = 0;
  const AffineMetric m0 = backend.evaluate(start);
  ++res.evaluations;
  ++res.batches;
  res.valueInitial = m0.value;
  res.overlapInitial = m0.overlap;
  if (m0.overlap < kMinOverlap) throwNoOverlap(m0.overlap, 0);

  Matrix4 world = toWorldMatrix(start, fixed.geometry, moving.geometry);
  const double orientation = gridOrientation(fixed.geometry, moving.geometry);  // every level's too
  AffineTransform t = start;
  AffineMetric last = m0;
  for (int l = levels - 1; l >= 0; --l) {
    // Level 0 of a single-level run starts from `start` itself (no round trip through world).
    const std::size_t k = static_cast<std::size_t>(l);
    AffineTransform tl = levels == 1 ? t : fromWorldMatrix(world, fg[k], mg[k]);
    if (loaded != l) {
      backend.setImages(levelImages(l));
      loaded = l;
    }
    res.perLevel.push_back(runLevel(tl, fg[k], mg[k], orientation, params, backend, l, progress, last));
    res.evaluations += res.perLevel.back().evaluations;
    res.batches += res.perLevel.back().batches;
    world = toWorldMatrix(tl, fg[k], mg[k]);
    t = tl;
  }
  for (std::size_t i = 0; i < res.perLevel.size(); ++i) {
    const int l = res.perLevel[i].level;
    res.perLevel[i].fixedSize = fg[static_cast<std::size_t>(l)].size;
    res.perLevel[i].movingSize = mg[static_cast<std::size_t>(l)].size;
  }
  res.transform = t;
  res.world = toWorldMatrix(t, fixed.geometry, moving.geometry);
  res.valueFinal = last.value;
  res.overlap = last.overlap;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace kortex
