#include "pipeline/Surface.hpp"
#include "core/Timing.hpp"

#include <Kokkos_Core.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "core/Errors.hpp"
#include "gpu/Resources.hpp"

namespace kortex::pipeline {

namespace {

std::string mib(std::int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}


}  // namespace

HostImage surfacePhiFromMask(HostImage mask, std::optional<double> label, std::optional<double> threshold) {
  if (label && threshold) throw InvalidArgument("surface: a label and a threshold exclude each other");
  if (mask.geometry.dimension != 3) throw InvalidArgument("surface: the mask is 2D; a surface needs a 3D volume");
  if (label || threshold) {
    // A copy: the caller's mask is not modified.
    HostImage selected("kortex::pipeline::surfaceMask", mask.geometry);
    selected.metadata = mask.metadata;
    const float* p = mask.data.data();
    float* q = selected.data.data();
    for (Index i = 0; i < mask.numVoxels(); ++i) {
      if (std::isnan(p[i])) throw InvalidArgument("surface: the mask has NaN at voxel " + std::to_string(i));
      q[i] = label ? (double(p[i]) == *label ? 1.0f : 0.0f) : (double(p[i]) >= *threshold ? 1.0f : 0.0f);
    }
    mask = selected;
  }
  return ref::signedDistanceFromMask(mask);
}

HostImage surfacePhiFromMesh(io::TriangleMesh const& mesh, double spacing, SurfaceNlmParams const& params) {
  if (!(spacing > 0.0) || !std::isfinite(spacing))
    throw InvalidArgument("surface: the grid spacing must be a finite number > 0, got " + std::to_string(spacing));
  const int h = (params.patch - 1) / 2;
  const int margin = static_cast<int>(std::ceil(params.band)) + h + 2;
  return ref::signedDistanceFromMask(io::meshToMask(mesh, spacing, margin));
}

std::int64_t surfaceBandSize(HostImage const& phi, float band) {
  const float* p = phi.data.data();
  const long long n = static_cast<long long>(phi.data.size());
  long long count = 0;
#pragma omp parallel for reduction(+ : count) schedule(static)
  for (long long i = 0; i < n; ++i) count += std::fabs(p[i]) <= band ? 1 : 0;
  return count;
}

HostImage surfaceDenoise(HostImage const& phi, SurfaceJob const& job, SurfaceRun* run) {
  SurfaceNlmParams const& params = job.params;
  params.validate();
  if (phi.geometry.dimension != 3) throw InvalidArgument("surface: phi must be a 3D image");
  if (job.maxBytes < 0) throw InvalidArgument("surface: the memory cap must be >= 0 bytes");
  requireFinite(phi, "surface: phi");
  const std::int64_t n = surfaceBandSize(phi, params.band);
  if (n == 0)
    throw InvalidArgument("surface: the narrow band |phi| <= " + std::to_string(params.band) +
                          " is empty (no surface within the band)");
  if (n > std::numeric_limits<std::int32_t>::max())
    throw InvalidArgument("surface: the narrow band has " + std::to_string(n) + " elements; at most 2^31 - 1 supported");
  if (params.neighbors >= n)
    throw InvalidArgument("surface: the neighbour count m = " + std::to_string(params.neighbors) +
                          " must be smaller than the band size " + std::to_string(n) +
                          " (each element has band size - 1 candidates)");
  const Backend backend = resolve(job.backend);
  using Exec = Kokkos::DefaultExecutionSpace;
  using Mem = Exec::memory_space;
  const bool onDevice = backend == Backend::Kokkos && !Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;
  const std::int64_t need =
      backend == Backend::Cpu ? ref::surfaceDenoiseBytes(n, params) : gpu::surfaceNlmBytes(n, params);
  const std::int64_t avail = job.maxBytes > 0                ? job.maxBytes
                             : backend == Backend::Cpu ? hostAvailableMemoryBytes()
                                                       : gpu::availableMemoryBytes<Mem>();
  if (avail > 0 && need > avail)
    throw InvalidArgument("surface: the narrow band has " + std::to_string(n) + " elements; its search needs " +
                          mib(need) + " of " + (onDevice ? "device" : "host") + " memory but " + mib(avail) +
                          " is available (lower the band half-width or the neighbour count)");

  SurfaceRun r;
  r.backend = backend;
  r.bandSize = n;
  r.bytes = need;
  const auto t0 = std::chrono::steady_clock::now();
  HostImage out;
  if (backend == Backend::Cpu) {
    r.executionSpace = "OpenMP reference";
    ref::SurfaceDenoiseInfo info;
    out = ref::surfaceDenoise(phi, params, &info);
    r.dt = info.dt;
  } else {
    Exec exec;
    r.executionSpace = Exec::name();
    const auto in = Kokkos::create_mirror_view_and_copy(Mem(), phi.data);
    ImageView<Mem> dout("kortex::pipeline::surfaceOut", in.extent(0), in.extent(1), in.extent(2));
    gpu::surfaceDenoise(exec, ConstImageView<Mem>(in), dout, params, &r.kokkos, job.progress);
    out = HostImage("kortex::pipeline::surfaceDenoised", phi.geometry);
    out.metadata = phi.metadata;
    Kokkos::deep_copy(out.data, dout);
    r.dt = r.kokkos.dt;
  }
  r.seconds = secondsSince(t0);
  if (run) *run = r;
  return out;
}

}  // namespace kortex::pipeline
