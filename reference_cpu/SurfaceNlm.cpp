#include "reference_cpu/Checks.hpp"
#include "reference_cpu/SurfaceNlm.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <string>

#include "core/Errors.hpp"

namespace kortex::ref {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// 1D squared distance transform of samples f (f[q] = 0 at features, +inf elsewhere, or the
// previous pass's values): d[p] = min_q (p - q)^2 + f[q]. Lower envelope of parabolas.
void distance1D(const double* f, double* d, Index n, Index* v, double* z) {
  Index k = -1;
  for (Index q = 0; q < n; ++q) {
    if (f[q] == kInf) continue;  // not a feature and no finite value yet: no parabola
    if (k < 0) {
      k = 0;
      v[0] = q;
      z[0] = -kInf;
      z[1] = kInf;
      continue;
    }
    auto cross = [&](Index p) {
      return ((f[q] + double(q) * double(q)) - (f[p] + double(p) * double(p))) / (2.0 * double(q - p));
    };
    double s = cross(v[k]);
    while (s <= z[k]) {  // z[0] = -inf ends the loop
      --k;
      s = cross(v[k]);
    }
    ++k;
    v[k] = q;
    z[k] = s;
    z[k + 1] = kInf;
  }
  if (k < 0) {
    for (Index p = 0; p < n; ++p) d[p] = kInf;
    return;
  }
  Index j = 0;
  for (Index p = 0; p < n; ++p) {
    while (z[j + 1] < double(p)) ++j;
    const double dp = double(p - v[j]);
    d[p] = dp * dp + f[v[j]];
  }
}

}  // namespace

std::vector<double> squaredDistanceTransform(std::vector<std::uint8_t> const& feature, Index nx, Index ny,
                                             Index nz) {
  const Index total = nx * ny * nz;
  if (static_cast<Index>(feature.size()) != total)
    throw InvalidArgument("squaredDistanceTransform: feature size does not match the grid");
  std::vector<double> a(static_cast<std::size_t>(total));
  for (Index i = 0; i < total; ++i) a[static_cast<std::size_t>(i)] = feature[static_cast<std::size_t>(i)] ? 0.0 : kInf;
  const Index ext[3] = {nx, ny, nz};
  const Index stride[3] = {1, nx, nx * ny};
  for (int axis = 0; axis < 3; ++axis) {
    const Index n = ext[axis], s = stride[axis], lines = total / n;
#pragma omp parallel
    {
      std::vector<double> f(static_cast<std::size_t>(n)), d(static_cast<std::size_t>(n)),
          z(static_cast<std::size_t>(n + 1));
      std::vector<Index> v(static_cast<std::size_t>(n));
#pragma omp for schedule(static)
      for (Index line = 0; line < lines; ++line) {
        // Start of the line: the other two coordinates from `line`.
        Index start;
        if (axis == 0)
          start = line * nx;
        else if (axis == 1)
          start = (line / nx) * nx * ny + line % nx;
        else
          start = line;
        for (Index q = 0; q < n; ++q) f[static_cast<std::size_t>(q)] = a[static_cast<std::size_t>(start + q * s)];
        distance1D(f.data(), d.data(), n, v.data(), z.data());
        for (Index q = 0; q < n; ++q) a[static_cast<std::size_t>(start + q * s)] = d[static_cast<std::size_t>(q)];
      }
    }
  }
  return a;
}

HostImage signedDistanceFromMask(HostImage const& mask) {
  const Geometry& g = mask.geometry;
  if (g.dimension != 3) throw InvalidArgument("surface: the mask must be a 3D image");
  const Index total = g.numVoxels();
  const float* m = mask.data.data();
  std::vector<std::uint8_t> inside(static_cast<std::size_t>(total)), outside(inside.size());
  Index nIn = 0;
  for (Index i = 0; i < total; ++i) {
    const float v = m[i];
    if (v != 0.0f && v != 1.0f)
      throw InvalidArgument("surface: the mask is not binary (voxel " + std::to_string(i) + " has value " +
                            std::to_string(v) + "; expected 0 or 1)");
    inside[static_cast<std::size_t>(i)] = v == 1.0f;
    outside[static_cast<std::size_t>(i)] = v == 0.0f;
    nIn += v == 1.0f;
  }
  if (nIn == 0) throw InvalidArgument("surface: the mask has no inside voxel (no surface)");
  if (nIn == total) throw InvalidArgument("surface: the mask has no outside voxel (no surface)");
  const auto dIn = squaredDistanceTransform(inside, g.nx(), g.ny(), g.nz());    // to the nearest inside voxel
  const auto dOut = squaredDistanceTransform(outside, g.nx(), g.ny(), g.nz());  // to the nearest outside voxel
  HostImage phi("kortex::surface::phi", g);
  float* p = phi.data.data();
  for (Index i = 0; i < total; ++i) {
    const std::size_t k = static_cast<std::size_t>(i);
    p[i] = inside[k] ? static_cast<float>(-(std::sqrt(dOut[k]) - 0.5)) : static_cast<float>(std::sqrt(dIn[k]) - 0.5);
  }
  return phi;
}

std::vector<std::int64_t> narrowBand(HostImage const& phi, float band) {
  std::vector<std::int64_t> ids;
  const float* p = phi.data.data();
  for (Index i = 0; i < phi.numVoxels(); ++i)
    if (std::abs(p[i]) <= band) ids.push_back(i);
  return ids;
}

std::vector<float> bandPatches(HostImage const& phi, std::vector<std::int64_t> const& ids, int patch) {
  const Geometry& g = phi.geometry;
  const Index nx = g.nx(), ny = g.ny(), nz = g.nz();
  const int h = (patch - 1) / 2, pv = patch * patch * patch;
  std::vector<float> rec(ids.size() * static_cast<std::size_t>(pv));
#pragma omp parallel for schedule(static)
  for (std::int64_t j = 0; j < static_cast<std::int64_t>(ids.size()); ++j) {
    const Index id = ids[static_cast<std::size_t>(j)];
    const Index x = id % nx, y = (id / nx) % ny, z = id / (nx * ny);
    std::size_t k = static_cast<std::size_t>(j) * static_cast<std::size_t>(pv);
    for (int oz = -h; oz <= h; ++oz)
      for (int oy = -h; oy <= h; ++oy)
        for (int ox = -h; ox <= h; ++ox)
          rec[k++] = phi.data(detail::clampIndex(z + oz, nz), detail::clampIndex(y + oy, ny), detail::clampIndex(x + ox, nx));
  }
  return rec;
}

SurfaceNeighbours surfaceNeighbours(std::vector<float> const& patches, std::int64_t n, int patchVoxels, int m) {
  if (m >= n)
    throw InvalidArgument("surface: the neighbour count m = " + std::to_string(m) + " must be smaller than the band size " +
                          std::to_string(n) + " (each element has band size - 1 candidates)");
  SurfaceNeighbours out;
  out.m = m;
  out.index.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(m));
  out.distance.resize(out.index.size());
  struct Cand {
    double d;
    std::int32_t l;
  };
  // Max-heap on the spec's order: the top is the worst candidate kept.
  auto worse = [](Cand const& a, Cand const& b) { return a.d < b.d || (a.d == b.d && a.l < b.l); };
#pragma omp parallel
  {
    std::vector<Cand> heap;
    heap.reserve(static_cast<std::size_t>(m) + 1);
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t j = 0; j < n; ++j) {
      heap.clear();
      const float* a = patches.data() + j * patchVoxels;
      for (std::int64_t l = 0; l < n; ++l) {
        if (l == j) continue;
        const float* b = patches.data() + l * patchVoxels;
        double d = 0.0;
        for (int k = 0; k < patchVoxels; ++k) {
          const double e = double(a[k]) - double(b[k]);
          d += e * e;
        }
        const Cand c{d, static_cast<std::int32_t>(l)};
        if (static_cast<int>(heap.size()) < m) {
          heap.push_back(c);
          std::push_heap(heap.begin(), heap.end(), worse);
        } else if (worse(c, heap.front())) {
          std::pop_heap(heap.begin(), heap.end(), worse);
          heap.back() = c;
          std::push_heap(heap.begin(), heap.end(), worse);
        }
      }
      std::sort_heap(heap.begin(), heap.end(), worse);  // ascending in the spec's order
      for (int k = 0; k < m; ++k) {
        const std::size_t o = static_cast<std::size_t>(j) * static_cast<std::size_t>(m) + static_cast<std::size_t>(k);
        out.index[o] = heap[static_cast<std::size_t>(k)].l;
        out.distance[o] = heap[static_cast<std::size_t>(k)].d;
      }
    }
  }
  return out;
}

std::int64_t surfaceDenoiseBytes(std::int64_t n, SurfaceNlmParams const& params) {
  const std::int64_t pv = std::int64_t(params.patch) * params.patch * params.patch;
  // ids 8, record 4 pv, index 4 + distance 8 + weight 8 per neighbour, phi twice 16.
  return n * (8 + pv * 4 + std::int64_t(params.neighbors) * (4 + 8 + 8) + 16);
}

HostImage surfaceDenoise(HostImage const& phi, SurfaceNlmParams const& params, SurfaceDenoiseInfo* info,
                         SurfaceNeighbours* neighboursOut) {
  const Geometry& g = phi.geometry;
  if (g.dimension != 3) throw InvalidArgument("surface: phi must be a 3D image");
  const auto ids = narrowBand(phi, params.band);
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  if (n == 0)
    throw InvalidArgument("surface: the narrow band |phi| <= " + std::to_string(params.band) +
                          " is empty (no surface within the band)");
  const int pv = params.patch * params.patch * params.patch;
  const auto rec = bandPatches(phi, ids, params.patch);
  SurfaceNeighbours nb = surfaceNeighbours(rec, n, pv, params.neighbors);
  const int m = params.neighbors;
  const Index nx = g.nx(), ny = g.ny();
  std::vector<double> w(nb.index.size());
  double maxSum = 0.0;
#pragma omp parallel for schedule(static) reduction(max : maxSum)
  for (std::int64_t j = 0; j < n; ++j) {
    const Index a = ids[static_cast<std::size_t>(j)];
    const double ax = double(a % nx), ay = double((a / nx) % ny), az = double(a / (nx * ny));
    double s = 0.0;
    for (int k = 0; k < m; ++k) {
      const std::size_t o = static_cast<std::size_t>(j) * static_cast<std::size_t>(m) + static_cast<std::size_t>(k);
      const Index b = ids[static_cast<std::size_t>(nb.index[o])];
      const double dx = double(b % nx) - ax, dy = double((b / nx) % ny) - ay, dz = double(b / (nx * ny)) - az;
      w[o] = std::exp(-(dx * dx + dy * dy + dz * dz) / params.c1 - nb.distance[o] / params.c2);
      s += w[o];
    }
    maxSum = std::max(maxSum, s);
  }
  const double dt = maxSum > 0.0 ? 1.0 / maxSum : 0.0;
  std::vector<double> cur(static_cast<std::size_t>(n)), next(cur.size());
  for (std::int64_t j = 0; j < n; ++j) cur[static_cast<std::size_t>(j)] = phi.data.data()[ids[static_cast<std::size_t>(j)]];
  for (int it = 0; it < params.iterations; ++it) {
#pragma omp parallel for schedule(static)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      const double pj = cur[static_cast<std::size_t>(j)];
      for (int k = 0; k < m; ++k) {
        const std::size_t o = static_cast<std::size_t>(j) * static_cast<std::size_t>(m) + static_cast<std::size_t>(k);
        s += w[o] * (cur[static_cast<std::size_t>(nb.index[o])] - pj);
      }
      next[static_cast<std::size_t>(j)] = pj + dt * s;
    }
    cur.swap(next);
  }
  HostImage out("kortex::surface::denoised", g);
  out.metadata = phi.metadata;
  Kokkos::deep_copy(out.data, phi.data);
  for (std::int64_t j = 0; j < n; ++j)
    out.data.data()[ids[static_cast<std::size_t>(j)]] = static_cast<float>(cur[static_cast<std::size_t>(j)]);
  if (info) {
    info->bandSize = n;
    info->dt = dt;
    info->maxWeightSum = maxSum;
  }
  if (neighboursOut) *neighboursOut = std::move(nb);
  return out;
}

}  // namespace kortex::ref
