#include "pipeline/Inverse.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/Affine.hpp"
#include "core/Apply.hpp"
#include "core/Compat.hpp"
#include "core/Errors.hpp"
#include "gpu/imageops/Inverse.hpp"
#include "reference_cpu/Inverse.hpp"

namespace kortex::pipeline {
namespace {

InverseStats invertKokkos(RegistrationPipelineResult const& r, AffineTransform const& m,
                          VectorField<Kokkos::HostSpace>& preimage, InverseParams const& params) {
  using Exec = Kokkos::DefaultExecutionSpace;
  using Mem = Exec::memory_space;
  Exec exec;
  auto u = Kokkos::create_mirror_view_and_copy(Mem(), r.u.data);
  auto p = Kokkos::create_mirror_view(Mem(), preimage.data);
  const InverseStats st = gpu::invertMap(exec, gpu::ConstField<Mem>(u), m, p, params);
  Kokkos::deep_copy(preimage.data, p);
  return st;
}

}  // namespace

InverseMap invertRegistration(RegistrationPipelineResult const& r, InverseParams const& params) {
  kx::ScopedRegion region("kortex::register::inverse");
  const auto t0 = std::chrono::steady_clock::now();
  params.validate();
  if (r.u.data.extent(0) != 3 || !r.u.geometry.sameGrid(r.fixedGrid))
    throw InvalidArgument("inverse: the displacement is not a 3-component field on the fixed grid");
  const AffineTransform m = inverseAffine(r.affine, "inverse: the affine stage");  // moving index -> s
  InverseMap inv;
  inv.preimage = VectorField<Kokkos::HostSpace>("kortex::register::preimage", r.movingGrid, 3);
  inv.stats = r.backend == Backend::Cpu ? ref::invertMap(r.u.data, m, inv.preimage.data, params)
                                        : invertKokkos(r, m, inv.preimage, params);
  inv.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return inv;
}

VectorField<Kokkos::HostSpace> inverseWorldDisplacement(RegistrationPipelineResult const& r, InverseMap const& inv) {
  const Geometry& g = r.movingGrid;
  VectorField<Kokkos::HostSpace> e("kortex::register::inverse_displacement", g, 3);
  const auto pre = inv.preimage.data;
#pragma omp parallel for collapse(2)
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        const auto wf = indexToWorld(r.fixedGrid, {double(pre(0, z, y, x)), double(pre(1, z, y, x)), double(pre(2, z, y, x))});
        const auto wm = indexToWorld(g, {double(x), double(y), double(z)});
        for (int c = 0; c < 3; ++c) e.data(c, z, y, x) = static_cast<float>(wf[c] - wm[c]);
      }
  return e;
}

InverseConsistency inverseConsistency(RegistrationPipelineResult const& r, InverseMap const& inv, HostImage const* mask) {
  const Geometry& g = r.fixedGrid;
  if (mask && !mask->geometry.sameGrid(g)) throw InvalidArgument("inverse consistency: the mask is not on the fixed grid");
  const auto pre = inv.preimage.data;
  const int mx = int(r.movingGrid.nx()), my = int(r.movingGrid.ny()), mz = int(r.movingGrid.nz());
  std::vector<double> d(std::size_t(g.numVoxels()), -1.0);
  // The component views made once: a View copied inside the parallel loop would touch its
  // reference count from several threads (not thread safe in a Serial-only Kokkos).
  using Comp = decltype(Kokkos::subview(pre, 0, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL));
  const std::array<Comp, 3> comp{Kokkos::subview(pre, 0, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL),
                                 Kokkos::subview(pre, 1, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL),
                                 Kokkos::subview(pre, 2, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL)};
#pragma omp parallel for collapse(2)
  for (Index z = 0; z < g.nz(); ++z)
    for (Index y = 0; y < g.ny(); ++y)
      for (Index x = 0; x < g.nx(); ++x) {
        if (mask && !(mask->data(z, y, x) > 0.0f)) continue;
        const auto q = mapPoint(r, x, y, z);
        if (!affineInside(q.data(), mx, my, mz)) continue;
        double e2 = 0.0;
        const double p[3] = {double(x), double(y), double(z)};
        for (int c = 0; c < 3; ++c) {
          const double back = affineSample(comp[c], q.data(), nullptr);
          e2 += (back - p[c]) * (back - p[c]);
        }
        d[std::size_t((z * g.ny() + y) * g.nx() + x)] = std::sqrt(e2);
      }
  std::vector<double> v;
  v.reserve(d.size());
  for (double e : d)
    if (e >= 0.0) v.push_back(e);
  InverseConsistency out;
  out.voxels = long(v.size());
  if (v.empty()) return out;
  double sum = 0.0;
  for (double e : v) sum += e;
  out.mean = sum / double(v.size());
  const std::size_t k = std::min(v.size() - 1, std::size_t(std::ceil(0.99 * double(v.size()))) - 1);
  std::nth_element(v.begin(), v.begin() + long(k), v.end());
  out.p99 = v[k];
  out.max = *std::max_element(v.begin(), v.end());
  return out;
}

}  // namespace kortex::pipeline
