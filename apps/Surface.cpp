
#include "apps/Surface.hpp"

#include <CLI/CLI.hpp>

#include <memory>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "apps/Commands.hpp"
#include "core/Backend.hpp"
#include "core/Errors.hpp"
#include "gpu/surface_nlm/SurfaceNlm.hpp"
#include "io/ImageIO.hpp"
#include "io/Output.hpp"
#include "io/Mesh.hpp"
#include "pipeline/JobFiles.hpp"
#include "pipeline/Surface.hpp"
#include "reference_cpu/SurfaceNlm.hpp"

namespace fs = std::filesystem;

namespace kortex::app {

namespace {

// phi from the input, as SurfaceOptions documents.
HostImage inputPhi(SurfaceOptions const& o, SurfaceNlmParams const& params) {
  if (io::isMeshPath(o.input)) {
    if (o.inputKind != "mask" || o.labelGiven || o.thresholdGiven)
      throw InvalidArgument("--input, --label and --threshold apply to image inputs, not to a mesh");
    const io::TriangleMesh mesh = io::readMesh(o.input);
    io::requireClosed(mesh, o.input);
    return pipeline::surfacePhiFromMesh(mesh, o.spacing, params);
  }
  HostImage img = io::readImage(o.input);
  if (img.geometry.dimension != 3) throw InvalidArgument("surface: '" + o.input + "' is 2D; a surface needs a 3D volume");
  if (o.inputKind == "phi") {
    if (o.labelGiven || o.thresholdGiven)
      throw InvalidArgument("--label and --threshold select a mask; they do not apply to --input phi");
    return img;
  }
  try {
    return pipeline::surfacePhiFromMask(img, o.labelGiven ? std::optional<double>(o.label) : std::nullopt,
                                        o.thresholdGiven ? std::optional<double>(o.threshold) : std::nullopt);
  } catch (InvalidArgument const& e) {
    std::string msg = std::string(e.what()) + " in '" + o.input + "'";
    if (!o.labelGiven && !o.thresholdGiven && std::string(e.what()).find("not binary") != std::string::npos)
      msg += "; use --label L or --threshold T to select the inside, or --input phi for a signed distance";
    throw InvalidArgument(msg);
  }
}

class Progress {
 public:
  explicit Progress(bool quiet) : quiet_(quiet), tty_(isatty(fileno(stderr)) != 0) {}
  void operator()(SurfaceNlmProgressInfo const& p) {
    if (quiet_) return;
    const int width = 24;
    const int filled = p.steps > 0 ? std::min(width, p.step * width / p.steps) : width;
    std::ostringstream s;
    s << "  " << std::left << std::setw(8) << p.stage << "[" << std::string(filled, '#')
      << std::string(width - filled, '.') << "] " << p.step << "/" << p.steps;
    if (tty_) {
      std::cerr << "\r" << s.str() << "   " << std::flush;
      dirty_ = true;
    } else if (p.step == p.steps) {
      std::cerr << s.str() << "\n";
    }
  }
  void end() {
    if (dirty_) std::cerr << "\n";
    dirty_ = false;
  }

 private:
  bool quiet_, tty_, dirty_ = false;
};

}  // namespace

int cmdSurfaceDenoise(SurfaceOptions const& o) {
  using Clock = std::chrono::steady_clock;
  SurfaceNlmParams params = o.params;
  if (!o.variant.empty()) params.variant = parseSurfaceNlmVariant(o.variant);
  const Backend backend = resolve(parseBackend(o.backend));
  if (!o.variant.empty() && backend == Backend::Cpu)
    throw InvalidArgument("--variant selects a Kokkos variant; it has no meaning with the CPU backend");
  if (o.inputKind != "mask" && o.inputKind != "phi")
    throw InvalidArgument("--input must be mask or phi, got '" + o.inputKind + "'");
  if (o.maxMemoryMiB < 0.0) throw InvalidArgument("--max-memory must be >= 0 MiB");
  if (fs::is_directory(o.input)) throw IoError("input '" + o.input + "' is a directory, not a file");
  if (!fs::exists(o.input)) throw IoError("input '" + o.input + "' does not exist");
  if (!io::isMeshPath(o.input)) io::requireSupportedExtension(o.input, io::Access::Read);
  io::requireWritableFile(o.output, "output");
  if (io::isMeshPath(o.output))
    throw InvalidArgument("OUT '" + o.output + "' is a mesh; OUT is the denoised phi image (use --out-mesh for the mesh)");
  io::requireSupportedExtension(o.output, io::Access::Write);
  if (!o.outMesh.empty()) {
    io::requireWritableFile(o.outMesh, "--out-mesh");
    if (!io::isMeshPath(o.outMesh))
      throw InvalidArgument("--out-mesh '" + o.outMesh + "' must end in .vtp, .stl or .obj");
  }
  pipeline::requireDistinctFiles({{"image", o.input}}, {{"denoised phi", o.output}, {"mesh", o.outMesh}});

  const auto t0 = Clock::now();
  const HostImage phi = inputPhi(o, params);
  const double prepS = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!o.quiet)
    std::cout << "surface: " << phi.geometry.nx() << "x" << phi.geometry.ny() << "x" << phi.geometry.nz() << " grid, band "
              << pipeline::surfaceBandSize(phi, params.band) << " elements (|phi| <= " << params.band << "), patch "
              << params.patch << "^3, m " << params.neighbors << ", " << params.iterations << " iterations, "
              << toString(backend)
              << (backend == Backend::Kokkos ? std::string(" (") + toString(params.variant) + ")" : std::string())
              << std::endl;

  pipeline::SurfaceJob job;
  job.params = params;
  job.backend = backend;
  job.maxBytes = static_cast<std::int64_t>(o.maxMemoryMiB * 1024.0 * 1024.0);
  Progress bar(o.quiet || backend == Backend::Cpu);
  job.progress = [&](SurfaceNlmProgressInfo const& p) { bar(p); };
  pipeline::SurfaceRun run;
  HostImage out;
  try {
    out = pipeline::surfaceDenoise(phi, job, &run);
  } catch (...) {
    bar.end();
    throw;
  }
  bar.end();
  const std::int64_t n = run.bandSize;
  const double runS = run.seconds;
  std::ostringstream summary;
  if (backend == Backend::Cpu) {
    summary << "dt " << run.dt;
  } else {
    gpu::SurfaceNlmInfo const& info = run.kokkos;
    summary << "search " << std::fixed << std::setprecision(3) << info.searchSeconds << " s (" << info.passes
            << " search launches, " << info.certificateFailures << " elements re-searched exactly), weights "
            << info.weightSeconds << " s, iterations " << info.iterateSeconds << " s, dt " << std::scientific
            << std::setprecision(4) << info.dt;
  }

  io::TriangleMesh mesh;
  if (!o.outMesh.empty()) mesh = io::zeroLevelSet(out);
  io::writeImage(out, o.output);
  if (!o.outMesh.empty()) {
    try {
      io::writeMesh(mesh, o.outMesh);
    } catch (...) {
      std::error_code ec;
      fs::remove(o.output, ec);  // no partial output
      throw;
    }
  }
  std::cout << "surface denoise: band " << n << " elements, " << std::fixed << std::setprecision(3) << runS
            << " s on " << (backend == Backend::Cpu ? "the CPU reference" : Kokkos::DefaultExecutionSpace::name())
            << " (input to phi " << prepS << " s); " << summary.str() << "\n  wrote " << o.output;
  if (!o.outMesh.empty()) std::cout << " and " << o.outMesh << " (" << mesh.triangles.size() << " triangles)";
  std::cout << std::endl;
  return 0;
}

void addSurfaceCommands(CLI::App& app, Action& action) {
  auto* surface = app.add_subcommand("surface", "Level-set surface processing");
  surface->require_subcommand(1);
  auto sop = std::make_shared<SurfaceOptions>();
  SurfaceOptions& so = *sop;
  auto* surfDenoise = surface->add_subcommand(
      "denoise", "Level-set non-local-means surface denoising (Dong et al.; exact all-pairs patch search) of a "
                 "mask, a signed distance or a closed triangle mesh");
  surfDenoise->add_option("IN", so.input, "Binary mask / label / probability volume, signed distance (--input phi), "
                                          "or closed mesh (.vtp .stl .obj)")->required();
  surfDenoise->add_option("OUT", so.output, "Denoised signed distance phi (image, same grid)")->required();
  surfDenoise->add_option("--band", so.params.band, "Narrow band |phi| <= band, voxels")->capture_default_str();
  surfDenoise->add_option("--patch", so.params.patch, "Patch edge n (n^3 patches, odd, <= 7)")->capture_default_str();
  surfDenoise->add_option("--neighbors", so.params.neighbors, "Most similar patches kept per element (m < band size)")
      ->capture_default_str();
  surfDenoise->add_option("--c1", so.params.c1, "Spatial scale of the weights, voxels^2")->capture_default_str();
  surfDenoise->add_option("--c2", so.params.c2, "Patch-distance scale of the weights")->capture_default_str();
  surfDenoise->add_option("--iterations", so.params.iterations, "Heat iterations K")->capture_default_str();
  surfDenoise->add_option("--out-mesh", so.outMesh, "Also write the zero level set as a mesh (.vtp .stl .obj)");
  surfDenoise->add_option("--input", so.inputKind, "Image input: mask (binary, or see --label/--threshold) | phi")
      ->capture_default_str();
  auto* surfLabel = surfDenoise->add_option("--label", so.label, "Inside = voxels equal to this label");
  auto* surfThr = surfDenoise->add_option("--threshold", so.threshold, "Inside = voxels >= this value");
  surfDenoise->add_option("--spacing", so.spacing, "Mesh input: voxel size of the grid, world units")
      ->capture_default_str();
  addBackendOption(*surfDenoise, so.backend);
  surfDenoise->add_option("--variant", so.variant, "Kokkos search: global|randomaccess|scratch (brute force, by candidate storage) or pruned (default: patch-sum bound, same neighbours)");
  surfDenoise->add_option("--max-memory", so.maxMemoryMiB,
                          "Memory the search may use, MiB (default: what the device / host reports free)");
  surfDenoise->add_flag("--quiet", so.quiet, "No progress bar");
  surfDenoise->callback([sop, surfLabel, surfThr, &action] {
    sop->labelGiven = surfLabel->count() > 0;
    sop->thresholdGiven = surfThr->count() > 0;
    action = [sop] { return cmdSurfaceDenoise(*sop); };
  });
}

}  // namespace kortex::app
