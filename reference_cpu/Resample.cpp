#include "reference_cpu/Resample.hpp"

#include <Eigen/Dense>

#include <cmath>
#include <map>
#include <string>

#include "core/Errors.hpp"

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

Index clampIndex(Index i, Index n) { return std::max<Index>(0, std::min<Index>(n - 1, i)); }

// ITK's displacement-field transform: the half-voxel box, edge samples repeated, identity outside.
Vec displaced(Step const& s, Vec const& x) {
  const Vec c = s.grid.index(x);
  for (int a = 0; a < 3; ++a)
    if (!(c[a] >= -0.5 && c[a] < double(s.grid.n[a]) - 0.5)) return x;
  Vec d = Vec::Zero();
  const Index f[3] = {Index(std::floor(c[0])), Index(std::floor(c[1])), Index(std::floor(c[2]))};
  for (Index dz = 0; dz <= 1; ++dz)
    for (Index dy = 0; dy <= 1; ++dy)
      for (Index dx = 0; dx <= 1; ++dx) {
        const Index k[3] = {f[0] + dx, f[1] + dy, f[2] + dz};
        double w = 1.0;
        for (int a = 0; a < 3; ++a) {
          const double frac = c[a] - double(f[a]);
          w *= (k[a] == f[a]) ? 1.0 - frac : frac;
        }
        const Index x0 = clampIndex(k[0], s.grid.n[0]), y0 = clampIndex(k[1], s.grid.n[1]), z0 = clampIndex(k[2], s.grid.n[2]);
        for (int comp = 0; comp < 3; ++comp) d[comp] += w * double(s.f->data(comp, z0, y0, x0));
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

double voxel(HostImage const& img, Index x, Index y, Index z) { return img.data(z, y, x); }

// Trilinear in the closed box [0, n-1]; the cell's lower corner at most n - 2.
float linearAt(HostImage const& img, Vec const& q) {
  const Index n[3] = {img.geometry.nx(), img.geometry.ny(), img.geometry.nz()};
  Index i0[3];
  double t[3];
  for (int a = 0; a < 3; ++a) {
    if (!(q[a] >= 0.0 && q[a] <= double(n[a] - 1))) return 0.0f;
    i0[a] = std::min<Index>(Index(std::floor(q[a])), n[a] - 2);
    t[a] = q[a] - double(i0[a]);
  }
  double v = 0.0;
  for (int k = 0; k < 8; ++k) {
    const int b[3] = {k & 1, (k >> 1) & 1, (k >> 2) & 1};
    const double w = (b[0] ? t[0] : 1 - t[0]) * (b[1] ? t[1] : 1 - t[1]) * (b[2] ? t[2] : 1 - t[2]);
    v += w * voxel(img, i0[0] + b[0], i0[1] + b[1], i0[2] + b[2]);
  }
  return float(v);
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
  Index f[3];
  double t[3];
  for (int a = 0; a < 3; ++a) {
    f[a] = Index(std::floor(q[a]));
    t[a] = q[a] - double(f[a]);
  }
  std::map<float, double> sums;  // ordered by label: the first maximum is the smallest label
  for (int k = 0; k < 8; ++k) {  // corner order: x fastest, then y, then z
    const int b[3] = {k & 1, (k >> 1) & 1, (k >> 2) & 1};
    const double w = (b[0] ? t[0] : 1 - t[0]) * (b[1] ? t[1] : 1 - t[1]) * (b[2] ? t[2] : 1 - t[2]);
    const float l = img.data(clampIndex(f[2] + b[2], n[2]), clampIndex(f[1] + b[1], n[1]), clampIndex(f[0] + b[0], n[0]));
    sums[l] += w;
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
