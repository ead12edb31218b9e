// CPU reference of the affine metric and resampling (specification: core/Affine.hpp), written on
// its own: Eigen matrices for the transform, the reference's trilinear interpolant
// (reference_cpu/detail/Trilinear.hpp: products of per-axis weights, the gradient by
// differentiating one factor), per-slice accumulators in double
// (sum over voxels of v w g (q, 1)^T as 3x4 matrices for v = 1, f, m, w the field-of-view weight)
// summed in slice order, so the result does not depend on the number of threads.
#include "reference_cpu/Affine.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>
#include <vector>

#include "core/Errors.hpp"
#include "reference_cpu/detail/MutualInformation.hpp"
#include "reference_cpu/detail/Trilinear.hpp"

namespace kortex::ref {

namespace {

using HostConstView = ConstImageView<Kokkos::HostSpace>;
using Mat34 = Eigen::Matrix<double, 3, 4>;

struct Map {
  Eigen::Matrix3d M;
  Eigen::Vector3d c, t;
  explicit Map(AffineTransform const& a) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) M(i, j) = a.matrix[static_cast<std::size_t>(3 * i + j)];
      c(i) = a.centre[static_cast<std::size_t>(i)];
      t(i) = a.translation[static_cast<std::size_t>(i)];
    }
  }
};

struct Grid {
  Index n[3];  // x, y, z
  explicit Grid(HostConstView const& v)
      : n{static_cast<Index>(v.extent(2)), static_cast<Index>(v.extent(1)), static_cast<Index>(v.extent(0))} {}
};

void checkVolumeView(HostConstView const& v, const char* who) {
  if (v.data() == nullptr) throw InvalidArgument(std::string(who) + ": view is not allocated");
  for (int r = 0; r < 3; ++r)
    if (v.extent(r) < 2)
      throw InvalidArgument(std::string(who) + ": affine metric needs 3D images with every extent >= 2");
}

// Trilinear sample of `img` at an inside point p (the box rule of detail/Trilinear.hpp); with grad,
// the exact gradient of the cell's polynomial.
double sample(HostConstView const& img, Grid const& g, Eigen::Vector3d const& p, Eigen::Vector3d* grad) {
  const double q[3] = {p(0), p(1), p(2)};
  const detail::TrilinearSample s = detail::sampleCell(img, g.n, detail::boxCell(g.n, q),
                                                       grad ? detail::TrilinearGradient::Exact : detail::TrilinearGradient::None);
  if (grad) *grad = Eigen::Vector3d(s.gradient[0], s.gradient[1], s.gradient[2]);
  return s.value;
}

bool inside(Eigen::Vector3d const& p, Grid const& g) {
  for (int a = 0; a < 3; ++a)
    if (!(p(a) >= 0.0 && p(a) <= static_cast<double>(g.n[a] - 1))) return false;
  return true;
}

// The field-of-view weight: the product over axes of the smoothstep of the distance to the
// nearer face of the moving grid, in units of the ramp width.
double edgeWeight(Eigen::Vector3d const& p, Grid const& g) {
  double w = 1.0;
  for (int a = 0; a < 3; ++a) {
    const double d = std::min(p(a), static_cast<double>(g.n[a] - 1) - p(a));
    const double u = std::clamp(d / kAffineEdgeRamp, 0.0, 1.0);
    w *= (3.0 - 2.0 * u) * u * u;
  }
  return w;
}

struct Acc {
  double counted = 0;  // fixed voxels the fixed mask holds
  double inside = 0, n = 0, sf = 0, sm = 0, sff = 0, smm = 0, sfm = 0;
  Mat34 g1 = Mat34::Zero(), gf = Mat34::Zero(), gm = Mat34::Zero();
  void add(Acc const& o) {
    counted += o.counted; inside += o.inside; n += o.n; sf += o.sf; sm += o.sm; sff += o.sff; smm += o.smm; sfm += o.sfm;
    g1 += o.g1; gf += o.gf; gm += o.gm;
  }
};

// Runs body(z) for z in [0, nz) on OpenMP threads; the first exception is rethrown after.
template <class Body>
void forSlices(Index nz, Body&& body) {
  std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic, 1)
  for (Index z = 0; z < nz; ++z) {
    try {
      body(z);
    } catch (...) {
#pragma omp critical(kortex_ref_affine_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

void checkHostImage(HostImage const& img, const char* who) {
  img.geometry.validate();
  if (img.data.data() == nullptr || img.data.extent(0) != static_cast<std::size_t>(img.geometry.nz()) ||
      img.data.extent(1) != static_cast<std::size_t>(img.geometry.ny()) ||
      img.data.extent(2) != static_cast<std::size_t>(img.geometry.nx()))
    throw InvalidArgument(std::string(who) + ": data does not match its geometry");
}

class RefBackend final : public AffineMetricBackend {
 public:
  void setImages(AffineLevelImages const& level) override { level_ = level; }
  AffineMetric evaluate(AffineTransform const& t) override {
    if (level_.metric == AffineMetricKind::Mi)
      return affineMutualInformation(level_.moving.data, level_.fixed.data, t, level_.miBins, level_.movingMask.data,
                                     level_.fixedMask.data);
    return affineMetric(level_.moving.data, level_.fixed.data, t, level_.movingMask.data, level_.fixedMask.data);
  }
 private:
  AffineLevelImages level_;
};

}  // namespace

namespace {

// The overlap's voxels, slice by slice on OpenMP threads: visit(acc, q, w, f, m, grad) for every fixed
// voxel the fixed mask holds whose mapped point is inside the moving grid and held by the moving
// mask; acc.counted counts the fixed voxels the fixed mask holds, acc.inside the overlap. Returns
// one accumulator per slice (the caller sums them in slice order).
template <class A, class Visit>
std::vector<A> overlapSlices(HostConstView moving, HostConstView fixed, AffineTransform const& t, HostConstView movingMask,
                             HostConstView fixedMask, Visit const& visit) {
  checkVolumeView(moving, "affine metric (moving)");
  checkVolumeView(fixed, "affine metric (fixed)");
  const bool useFixedMask = fixedMask.data() != nullptr, useMovingMask = movingMask.data() != nullptr;
  const Map map(t);
  const Grid gm(moving), gf(fixed);
  std::vector<A> slices(static_cast<std::size_t>(gf.n[2]));
  forSlices(gf.n[2], [&](Index z) {
    A a;
    Eigen::Vector3d grad;
    for (Index y = 0; y < gf.n[1]; ++y)
      for (Index x = 0; x < gf.n[0]; ++x) {
        if (useFixedMask && fixedMask(z, y, x) == 0.0f) continue;
        ++a.counted;
        const Eigen::Vector3d q = Eigen::Vector3d(double(x), double(y), double(z)) - map.c;
        const Eigen::Vector3d p = map.M * q + map.c + map.t;
        if (!inside(p, gm)) continue;
        if (useMovingMask && movingMask(Index(std::floor(p(2) + 0.5)), Index(std::floor(p(1) + 0.5)),
                                        Index(std::floor(p(0) + 0.5))) == 0.0f)
          continue;
        ++a.inside;
        const double m = sample(moving, gm, p, &grad);
        visit(a, q, edgeWeight(p, gm), double(fixed(z, y, x)), m, grad);
      }
    slices[static_cast<std::size_t>(z)] = a;
  });
  return slices;
}

// The overlap fraction: inside over the fixed voxels that count (all, or the fixed mask's).
double overlapOf(double inside, double counted, bool useFixedMask, HostConstView fixed) {
  return inside / (useFixedMask ? counted : double(fixed.extent(0)) * double(fixed.extent(1)) * double(fixed.extent(2)));
}

void setGradient(Mat34 const& g, AffineMetric& r) {
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) r.gradient[static_cast<std::size_t>(3 * i + j)] = g(i, j);
    r.gradient[static_cast<std::size_t>(9 + i)] = g(i, 3);
  }
}

}  // namespace

AffineMetric affineMetric(HostConstView moving, HostConstView fixed, AffineTransform const& t, HostConstView movingMask,
                          HostConstView fixedMask) {
  const auto slices = overlapSlices<Acc>(moving, fixed, t, movingMask, fixedMask,
                                         [&](Acc& a, Eigen::Vector3d const& q, double w, double f, double m,
                                             Eigen::Vector3d const& grad) {
                                           a.n += w; a.sf += w * f; a.sm += w * m; a.sff += w * f * f; a.smm += w * m * m;
                                           a.sfm += w * f * m;
                                           Eigen::Vector4d qh4;
                                           qh4 << q, 1.0;
                                           const Mat34 outer = w * grad * qh4.transpose();  // w dm/d(M | t), row i = component
                                           a.g1 += outer;
                                           a.gf += f * outer;
                                           a.gm += m * outer;
                                         });
  Acc s;
  for (auto const& a : slices) s.add(a);

  AffineMetric r;
  r.count = static_cast<Index>(s.inside);
  r.overlap = overlapOf(s.inside, s.counted, fixedMask.data() != nullptr, fixed);
  if (s.n < 2) return r;
  const double vf = s.sff - s.sf * s.sf / s.n, vm = s.smm - s.sm * s.sm / s.n;
  if (!(vf > kAffineVarianceFloor * s.sff) || !(vm > kAffineVarianceFloor * s.smm)) return r;
  const double cov = s.sfm - s.sf * s.sm / s.n;
  const double denom = std::sqrt(vf * vm);
  r.value = cov / denom;
  // d cov = Gf - (Sf / n) G1;  d vm / 2 = Gm - (Sm / n) G1.
  const Mat34 dcov = s.gf - (s.sf / s.n) * s.g1;
  const Mat34 dvmHalf = s.gm - (s.sm / s.n) * s.g1;
  setGradient(dcov / denom - (r.value / vm) * dvmHalf, r);
  return r;
}

AffineMetric affineMutualInformation(HostConstView moving, HostConstView fixed, AffineTransform const& t, int bins,
                                     HostConstView movingMask, HostConstView fixedMask) {
  validateMiBins(bins);
  const detail::MiBins mb{bins};
  struct Hist {
    double counted = 0, inside = 0;
    std::vector<double> h;
  };
  auto histSlices = overlapSlices<Hist>(moving, fixed, t, movingMask, fixedMask,
                                        [&](Hist& a, Eigen::Vector3d const&, double w, double f, double m, Eigen::Vector3d const&) {
                                          if (a.h.empty()) a.h.assign(std::size_t(mb.B * mb.B), 0.0);
                                          mb.add(a.h, f, m, w);
                                        });
  std::vector<double> h(std::size_t(mb.B * mb.B), 0.0);
  double counted = 0, insideCount = 0;
  for (auto const& a : histSlices) {
    for (std::size_t c = 0; c < a.h.size(); ++c) h[c] += a.h[c];
    counted += a.counted;
    insideCount += a.inside;
  }
  AffineMetric r;
  r.count = static_cast<Index>(insideCount);
  r.overlap = overlapOf(insideCount, counted, fixedMask.data() != nullptr, fixed);
  double total = 0.0;
  for (double v : h) total += v;
  if (!(total > 0.0)) return r;
  std::vector<double> logRatio;
  r.value = detail::miOfHistogram(h, total, mb.B, logRatio);
  struct Grad {
    double counted = 0, inside = 0;
    Mat34 g = Mat34::Zero();
  };
  const auto gradSlices = overlapSlices<Grad>(
      moving, fixed, t, movingMask, fixedMask,
      [&](Grad& a, Eigen::Vector3d const& q, double w, double f, double m, Eigen::Vector3d const& grad) {
        Eigen::Vector4d qh;
        qh << q, 1.0;
        a.g += (w * double(mb.B - 4) * mb.slope(f, m, logRatio)) * grad * qh.transpose();
      });
  Mat34 g = Mat34::Zero();
  for (auto const& a : gradSlices) g += a.g;
  setGradient(g / total, r);
  return r;
}

AffineResult affineRegister(HostImage const& moving, HostImage const& fixed, AffineParams const& params,
                            AffineProgress const& progress, AffineMasks const& masks) {
  RefBackend backend;
  return affineOptimise(moving, fixed, params, backend, progress, masks);
}

HostImage resampleAffine(HostImage const& moving, Geometry const& fixedGrid, AffineTransform const& t) {
  checkHostImage(moving, "resampleAffine (moving)");
  checkVolumeView(moving.data, "resampleAffine (moving)");
  HostImage out("kortex::ref::resampleAffine", fixedGrid);
  const Map map(t);
  const Grid gm(moving.data);
  const HostConstView mv = moving.data;
  forSlices(fixedGrid.nz(), [&](Index z) {
    for (Index y = 0; y < fixedGrid.ny(); ++y)
      for (Index x = 0; x < fixedGrid.nx(); ++x) {
        const Eigen::Vector3d p = map.M * (Eigen::Vector3d(double(x), double(y), double(z)) - map.c) + map.c + map.t;
        out.data(z, y, x) = inside(p, gm) ? static_cast<float>(sample(mv, gm, p, nullptr)) : 0.0f;
      }
  });
  return out;
}

HostImage resampleAffineLabels(HostImage const& labels, Geometry const& fixedGrid, AffineTransform const& t) {
  checkHostImage(labels, "resampleAffineLabels (labels)");
  HostImage out("kortex::ref::resampleAffineLabels", fixedGrid);
  out.metadata = labels.metadata;
  const Map map(t);
  const Grid gm(labels.data);
  forSlices(fixedGrid.nz(), [&](Index z) {
    for (Index y = 0; y < fixedGrid.ny(); ++y)
      for (Index x = 0; x < fixedGrid.nx(); ++x) {
        const Eigen::Vector3d p = map.M * (Eigen::Vector3d(double(x), double(y), double(z)) - map.c) + map.c + map.t;
        Index k[3];
        bool in = true;
        for (int a = 0; a < 3; ++a) {
          k[a] = static_cast<Index>(std::floor(p(a) + 0.5));
          in = in && k[a] >= 0 && k[a] <= gm.n[a] - 1;
        }
        out.data(z, y, x) = in ? labels.data(k[2], k[1], k[0]) : 0.0f;
      }
  });
  return out;
}

double labelDice(HostImage const& a, HostImage const& b, std::vector<int> const& set) {
  if (!a.geometry.sameGrid(b.geometry) || a.data.size() != b.data.size())
    throw InvalidArgument("labelDice: the two label maps are not on the same grid");
  auto member = [&](float v) {
    if (!std::isfinite(v)) return false;
    const long l = std::lround(v);
    return std::find(set.begin(), set.end(), static_cast<int>(l)) != set.end();
  };
  double na = 0, nb = 0, both = 0;
  const float* pa = a.data.data();
  const float* pb = b.data.data();
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    const bool ia = member(pa[i]), ib = member(pb[i]);
    na += ia;
    nb += ib;
    both += ia && ib;
  }
  return na + nb > 0 ? 2.0 * both / (na + nb) : 1.0;
}

}  // namespace kortex::ref
