#include "pipeline/Surface.hpp"
#include "pipeline/detail/JsonReader.hpp"
#include "pipeline/ParamsJson.hpp"
#include "io/Output.hpp"
#include "io/ImageIO.hpp"
#include "core/Compat.hpp"
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

namespace {

// The denoise stage: phi in memory, the job validated (its params, backend, memory cap, progress);
// what depends on phi (3D, finite, the band's size and memory) checked here.
HostImage surfaceDenoise(HostImage const& phi, SurfaceJob const& job, SurfaceRun* run) {
  SurfaceNlmParams const& params = job.params;
  if (phi.geometry.dimension != 3) throw InvalidArgument("surface: phi must be a 3D image");
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
  const std::int64_t avail = job.maxMemoryMiB > 0          ? std::int64_t(job.maxMemoryMiB * 1048576.0)
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

}  // namespace

SurfaceInputKind parseSurfaceInputKind(std::string const& s) {
  if (s == "mask") return SurfaceInputKind::Mask;
  if (s == "phi") return SurfaceInputKind::Phi;
  throw InvalidArgument("surface: the input kind must be mask or phi, got '" + s + "'");
}

const char* toString(SurfaceInputKind k) { return k == SurfaceInputKind::Phi ? "phi" : "mask"; }

namespace {

bool meshInput(SurfaceJob const& job) { return !job.input.inMemory() && io::isMeshPath(job.input.path); }

// phi of the input (a mesh voxelised, a mask's signed distance, or phi as it is).
HostImage phiOf(SurfaceJob const& job) {
  const std::string name = job.input.inMemory() ? std::string("the image") : "'" + job.input.path.string() + "'";
  if (meshInput(job)) {
    const io::TriangleMesh mesh = io::readMesh(job.input.path);
    io::requireClosed(mesh, job.input.path.string());
    return surfacePhiFromMesh(mesh, job.meshSpacing, job.params);
  }
  HostImage img = readImageInput(job.input);
  if (img.geometry.dimension != 3) throw InvalidArgument("surface: " + name + " is 2D; a surface needs a 3D volume");
  if (job.inputKind == SurfaceInputKind::Phi) return img;
  try {
    return surfacePhiFromMask(img, job.label, job.threshold);
  } catch (InvalidArgument const& e) {
    std::string msg = std::string(e.what()) + " in " + name;
    if (!job.label && !job.threshold && std::string(e.what()).find("not binary") != std::string::npos)
      msg += "; select the inside with a label or a threshold, or give the input as a signed distance (phi)";
    throw InvalidArgument(msg);
  }
}

}  // namespace

void SurfaceJob::validate() const {
  params.validate();
  requireKokkosForVariant(variantGiven, backend, "surface", "a variant selects a Kokkos implementation");
  requireMemoryCap(maxMemoryMiB, "surface");
  if (label && threshold) throw InvalidArgument("surface: a mask is selected by a label or by a threshold, not both");
  if (inputKind == SurfaceInputKind::Phi && (label || threshold))
    throw InvalidArgument("surface: a label or a threshold selects a mask; they do not apply to a signed distance (phi) input");
  const bool mesh = !input.inMemory() && io::isMeshPath(input.path);
  if (mesh && (inputKind != SurfaceInputKind::Mask || label || threshold))
    throw InvalidArgument("surface: the input kind, label and threshold apply to image inputs, not to a mesh");
  if (!(meshSpacing > 0.0) || !std::isfinite(meshSpacing))
    throw InvalidArgument("surface: the mesh grid spacing must be a finite number > 0, got " + std::to_string(meshSpacing));
  if (mesh) requireInputFile(input.path, "input mesh");
  else requireImageInput(input, "input image", "surface");
  if (output.empty() && !keepResult) throw InvalidArgument("surface: no output is named");
  if (!output.empty()) {
    io::requireWritableFile(output, "the denoised phi");
    if (io::isMeshPath(output))
      throw InvalidArgument("surface: the output '" + output.string() + "' is a mesh; the output is the denoised phi image "
                            "(its zero level set goes to the mesh output)");
    io::requireSupportedExtension(output, io::Access::Write);
  }
  if (!outMesh.empty()) {
    io::requireWritableFile(outMesh, "the mesh");
    if (!io::isMeshPath(outMesh)) throw InvalidArgument("surface: the mesh output '" + outMesh.string() + "' must end in .vtp, .stl or .obj");
  }
  std::vector<JobFile> inputs;
  if (!input.inMemory()) inputs.push_back({"image", input.path});
  requireDistinctFiles(inputs, {{"denoised phi", output}, {"mesh", outMesh}});
}

nlohmann::json toJson(SurfaceJob const& job) {
  nlohmann::json j = {{"job", "surface"},
                      {"input", toJson(job.input)},
                      {"input_kind", toString(job.inputKind)},
                      {"mesh_spacing", job.meshSpacing},
                      {"output", job.output.string()},
                      {"out_mesh", job.outMesh.string()},
                      {"params", toJson(job.params)},
                      {"backend", toString(job.backend)},
                      {"variant_given", job.variantGiven},
                      {"max_memory", job.maxMemoryMiB},
                      {"keep_result", job.keepResult}};
  j["label"] = job.label ? nlohmann::json(*job.label) : nlohmann::json();
  j["threshold"] = job.threshold ? nlohmann::json(*job.threshold) : nlohmann::json();
  return j;
}

SurfaceJob surfaceJobFromJson(nlohmann::json const& j) {
  SurfaceJob job;
  detail::JsonReader r(j, "surface job");
  r.jobKind("surface");
  job.input.path = inputPathFromJson(r.raw("input"), "surface job", "input");
  r.choice("input_kind", job.inputKind, parseSurfaceInputKind).number("mesh_spacing", job.meshSpacing);
  r.path("output", job.output).path("out_mesh", job.outMesh).object("params", job.params);
  r.choice("backend", job.backend, parseBackend).flag("variant_given", job.variantGiven);
  r.number("max_memory", job.maxMemoryMiB).flag("keep_result", job.keepResult);
  for (auto [key, target] : {std::pair<const char*, std::optional<double>*>{"label", &job.label}, {"threshold", &job.threshold}})
    if (nlohmann::json const* v = r.raw(key); v && !v->is_null()) {
      if (!v->is_number()) r.wrongType(key, "a number or null", *v);
      *target = v->get<double>();
    }
  r.done();
  return job;
}

SurfaceJobResult runSurfaceJob(SurfaceJob const& job, SurfaceRun* run) {
  {
    kx::ScopedRegion region("kortex::surface::check");
    job.validate();
  }
  SurfaceJobResult r;
  {
    kx::ScopedRegion region("kortex::surface::phi");
    const auto t0 = std::chrono::steady_clock::now();
    r.phi = phiOf(job);
    r.secondsPhi = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  r.image = surfaceDenoise(r.phi, job, run);
  if (!job.outMesh.empty()) {
    kx::ScopedRegion region("kortex::surface::mesh");
    r.mesh = io::zeroLevelSet(r.image);
  }
  kx::ScopedRegion region("kortex::surface::write");
  r.written = writeAllOrNone({{"denoised phi", job.output, [&](std::filesystem::path const& p) { io::writeImage(r.image, p); }},
                              {"mesh", job.outMesh, [&](std::filesystem::path const& p) { io::writeMesh(r.mesh, p); }}});
  return r;
}

}  // namespace kortex::pipeline
