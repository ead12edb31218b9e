
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
  pipeline::SurfaceJob job;  // the flags bound; the job checks every policy
  job.input.path = o.input;
  job.inputKind = pipeline::parseSurfaceInputKind(o.inputKind);
  if (o.labelGiven) job.label = o.label;
  if (o.thresholdGiven) job.threshold = o.threshold;
  job.meshSpacing = o.spacing;
  job.output = o.output;
  job.outMesh = o.outMesh;
  job.params = o.params;
  job.variantGiven = !o.variant.empty();
  if (job.variantGiven) job.params.variant = parseSurfaceNlmVariant(o.variant);
  job.backend = parseBackend(o.backend);
  job.maxMemoryMiB = o.maxMemoryMiB;
  const Backend backend = resolve(job.backend);
  Progress bar(o.quiet || backend == Backend::Cpu);
  job.progress = [&](SurfaceNlmProgressInfo const& p) { bar(p); };
  pipeline::SurfaceRun run;
  pipeline::SurfaceJobResult r;
  try {
    r = pipeline::runSurfaceJob(job, &run);
  } catch (...) {
    bar.end();
    throw;
  }
  bar.end();
  auto const& params = job.params;
  if (!o.quiet)
    std::cout << "surface: " << r.phi.geometry.nx() << "x" << r.phi.geometry.ny() << "x" << r.phi.geometry.nz()
              << " grid, band " << run.bandSize << " elements (|phi| <= " << params.band << "), patch " << params.patch
              << "^3, m " << params.neighbors << ", " << params.iterations << " iterations, " << toString(backend)
              << (backend == Backend::Kokkos ? std::string(" (") + toString(params.variant) + ")" : std::string()) << "\n";
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
  std::cout << "surface denoise: band " << run.bandSize << " elements, " << std::fixed << std::setprecision(3)
            << run.seconds << " s on " << (backend == Backend::Cpu ? "the CPU reference" : Kokkos::DefaultExecutionSpace::name())
            << " (input to phi " << r.secondsPhi << " s); " << summary.str() << "\n  wrote " << o.output;
  if (!o.outMesh.empty()) std::cout << " and " << o.outMesh << " (" << r.mesh.triangles.size() << " triangles)";
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
  surfDenoise->add_option("--variant", so.variant, "Kokkos search: global|randomaccess|scratch (brute force, by candidate storage) or pruned (default: patch-sum bound, same neighbours) or prunedblocks (the sum bound, then block sums)");
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
