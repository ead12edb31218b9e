#include "reference_cpu/Resample.hpp"

#include <Eigen/Dense>

#include <cmath>
#include <map>
#include <string>

#include "core/Errors.hpp"
#include "reference_cpu/detail/Trilinear.hpp"

namespace kortex::ref {

namespace {

using Vec = Eigen::Vector3d;

// index -> world and world -> index of a grid, as an Eigen affine map.
struct Grid {
  Eigen::Matrix3d toWorld, toIndex;
  Vec origin;
  Index n[3];
  explicit Grid(Geometry const& g) {
    Eigen::Matrix3d d;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) d(i, j) = g.direction[3 * i + j];
    toWorld = d * Vec(g.spacing[0], g.spacing[1], g.spacing[2]).asDiagonal();
    toIndex = toWorld.inverse();
    origin = Vec(g.origin[0], g.origin[1], g.origin[2]);
    for (int a = 0; a < 3; ++a) n[a] = g.size[a];
  }
  Vec world(Vec const& p) const { return toWorld * p + origin; }
  Vec index(Vec const& w) const { return toIndex * (w - origin); }
};

// One step of the chain, applied in order.
struct Step {
  bool field = false;
  Eigen::Matrix3d a;
  Vec t;
  const VectorField<Kokkos::HostSpace>* f = nullptr;
  Grid grid{Geometry::make3D(2, 2, 2)};
};

// ITK's displacement-field transform: the half-voxel box, edge samples repeated (the clamped cell
// of detail/Trilinear.hpp), identity outside.
Vec displaced(Step const& s, Vec const& x) {
  const Vec c = s.grid.index(x);
  for (int a = 0; a < 3; ++a)
    if (!(c[a] >= -0.5 && c[a] < double(s.grid.n[a]) - 0.5)) return x;
  const double q[3] = {c[0], c[1], c[2]};
  const detail::TrilinearCell cell = detail::clampedCell(s.grid.n, q);
  Vec d;
  for (int comp = 0; comp < 3; ++comp) {
    auto at = [&](Index z, Index y, Index xi) { return s.f->data(comp, z, y, xi); };
    d[comp] = detail::sampleCell(at, s.grid.n, cell, detail::TrilinearGradient::None).value;
  }
  return x + d;
}

std::vector<Step> stepsOf(TransformChain const& chain) {
  std::vector<Step> steps;
  for (auto it = chain.transforms.begin(); it != chain.transforms.end(); ++it) {  // the first listed first
    Step s;
    if (it->kind == ChainKind::Field) {
      s.field = true;
      s.f = &it->field;
      s.grid = Grid(it->field.geometry);
    } else {
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) s.a(i, j) = it->matrix[4 * i + j];
        s.t[i] = it->matrix[4 * i + 3];
      }
    }
    steps.push_back(s);
  }
  return steps;
}

// Trilinear in the closed box [0, n-1] (the box cell of detail/Trilinear.hpp); 0 outside.
float linearAt(HostImage const& img, Vec const& q) {
  const Index n[3] = {img.geometry.nx(), img.geometry.ny(), img.geometry.nz()};
  for (int a = 0; a < 3; ++a)
    if (!(q[a] >= 0.0 && q[a] <= double(n[a] - 1))) return 0.0f;
  const double p[3] = {q[0], q[1], q[2]};
  return float(detail::sampleCell(img.data, n, detail::boxCell(n, p), detail::TrilinearGradient::None).value);
}

bool insideHalf(HostImage const& img, Vec const& q) {
  const Index n[3] = {img.geometry.nx(), img.geometry.ny(), img.geometry.nz()};
  for (int a = 0; a < 3; ++a)
    if (!(q[a] >= -0.5 && q[a] < double(n[a]) - 0.5)) return false;
  return true;
}

float nearestAt(HostImage const& img, Vec const& q) {
  if (!insideHalf(img, q)) return 0.0f;
  return img.data(Index(std::floor(q[2] + 0.5)), Index(std::floor(q[1] + 0.5)), Index(std::floor(q[0] + 0.5)));
}

// The label with the largest summed trilinear weight; ties: the smaller label.
float labelAt(HostImage const& img, Vec const& q) {
  if (!insideHalf(img, q)) return 0.0f;
  const Index n[3] = {img.geometry.nx(), img.geometry.ny(), img.geometry.nz()};
  const double p[3] = {q[0], q[1], q[2]};
  const detail::TrilinearCell c = detail::clampedCell(n, p);
  std::map<float, double> sums;  // ordered by label: the first maximum is the smallest label
  for (int k = 0; k < 8; ++k) {  // corner order: x fastest, then y, then z
    const int b[3] = {k & 1, (k >> 1) & 1, (k >> 2) & 1};
    const float l = img.data(b[2] ? c.hi[2] : c.lo[2], b[1] ? c.hi[1] : c.lo[1], b[0] ? c.hi[0] : c.lo[0]);
    sums[l] += detail::cornerWeight(c, b[0], b[1], b[2]);
  }
  float best = sums.begin()->first;
  double bestSum = sums.begin()->second;
  for (auto const& [l, s] : sums)
    if (s > bestSum) best = l, bestSum = s;
  return best;
}

}  // namespace

HostImage resample(HostImage const& input, Geometry const& reference, TransformChain const& chain,
                   ApplyInterpolation interpolation) {
  if (input.geometry.dimension != 3 || input.geometry.nx() < 2 || input.geometry.ny() < 2 || input.geometry.nz() < 2)
    throw InvalidArgument("resample: the input must be 3D with at least 2 voxels along every axis");
  HostImage out("kortex::ref::resample", reference);
  const Grid ref(reference), in(input.geometry);
  const std::vector<Step> steps = stepsOf(chain);
  const Index nx = reference.nx(), ny = reference.ny(), nz = reference.nz();
#pragma omp parallel for collapse(2) schedule(static)
  for (Index z = 0; z < nz; ++z)
    for (Index y = 0; y < ny; ++y)
      for (Index x = 0; x < nx; ++x) {
        Vec w = ref.world(Vec(double(x), double(y), double(z)));
        for (Step const& s : steps) w = s.field ? displaced(s, w) : Vec(s.a * w + s.t);
        const Vec q = in.index(w);
        float v = 0.0f;
        switch (interpolation) {
          case ApplyInterpolation::Linear: v = linearAt(input, q); break;
          case ApplyInterpolation::Nearest: v = nearestAt(input, q); break;
          case ApplyInterpolation::Label: v = labelAt(input, q); break;
        }
        out.data(z, y, x) = v;
      }
  return out;
}

}  // namespace kortex::ref
